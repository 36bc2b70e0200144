// The few Grafana objects the dashboards are made of, so that all of them
// share their conventions: schemaVersion 39, a stable uid, a datasource
// variable, job, run and instance variables, a unit on every panel, the
// configured rate interval in every rate, job and instance matchers in every
// query.
local ds = { type: 'prometheus', uid: '${datasource}' };
{
  // A multi-value variable over the values of `label` on `metric` for the
  // selected jobs and hosts; "All" matches series without the label too.
  labelVariable(name, title, metric, label, base):: {
    local q = 'label_values(%s{%s}, %s)' % [metric, base, label],
    name: name,
    label: title,
    type: 'query',
    datasource: ds,
    query: { query: q, refId: name },
    definition: q,
    multi: true,
    includeAll: true,
    allValue: '.*',
    refresh: 2,
    sort: 1,
    current: {},
    hide: 0,
  },

  variables(jobSelector, extra):: [
    { name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus', current: {}, hide: 0 },
    {
      local q = 'label_values(gym_exporter_build_info{%s}, job)' % jobSelector,
      name: 'job',
      label: 'Job',
      type: 'query',
      datasource: ds,
      query: { query: q, refId: 'job' },
      definition: q,
      multi: true,
      includeAll: true,
      refresh: 2,
      current: {},
      hide: 0,
    },
    // The run an exporter serves (gym_run_info, joined on instance rather
    // than a label of every series): picking runs picks their instances.
    // All (.*) also matches build_info, which has no run label, so that
    // exporters without gym_run_info are listed too.
    {
      local q = 'label_values(gym_run_info{job=~"$job"}, run)',
      name: 'run',
      label: 'Run',
      type: 'query',
      datasource: ds,
      query: { query: q, refId: 'run' },
      definition: q,
      multi: true,
      includeAll: true,
      allValue: '.*',
      refresh: 2,
      current: {},
      hide: 0,
    },
    {
      local q = 'label_values({__name__=~"gym_run_info|gym_exporter_build_info", job=~"$job", run=~"$run"}, instance)',
      name: 'instance',
      label: 'Instance',
      type: 'query',
      datasource: ds,
      query: { query: q, refId: 'instance' },
      definition: q,
      multi: true,
      includeAll: true,
      refresh: 2,
      current: {},
      hide: 0,
    },
  ] + extra,

  // targets: [[expr, legend], ...]; kind: timeseries or heatmap; exemplars:
  // its queries ask for the buckets' exemplars (trace ids: a point links to
  // the trace, docs/metrics.md#exemplars).
  // instant: its queries are instant, as a table (kind 'table').
  panel(title, unit, targets, kind='timeseries', description='', stack=false, exemplars=false, instant=false):: {
    type: kind,
    title: title,
    description: description,
    datasource: ds,
    fieldConfig: {
      defaults: { unit: unit } + (
        if kind == 'timeseries' then { custom: { stacking: { mode: if stack then 'normal' else 'none' } } } else {}
      ),
      overrides: [],
    },
    options:
      if kind == 'timeseries' then {
        legend: { displayMode: 'table', placement: 'bottom', calcs: ['lastNotNull', 'max'] },
        tooltip: { mode: 'multi' },
      } else if kind == 'heatmap' then {
        calculate: false,
        yAxis: { unit: unit },
        cellGap: 1,
        color: { scheme: 'Oranges', mode: 'scheme' },
      } else {},
    targets: [
      {
        refId: std.char(std.codepoint('A') + i),
        expr: targets[i][0],
        legendFormat: targets[i][1],
        datasource: ds,
      } + (if kind == 'heatmap' then { format: 'heatmap' } else {})
      + (if exemplars then { exemplar: true } else {})
      + (if instant then { instant: true, range: false, format: 'table' } else {})
      for i in std.range(0, std.length(targets) - 1)
    ],
  },

  // Panels two to a row, 8 high, numbered from 1.
  dashboard(config, uid, title, description, panels, extraVariables):: {
    uid: uid,
    title: title,
    description: description,
    tags: config.dashboardTags,
    schemaVersion: 39,
    version: 1,
    editable: true,
    graphTooltip: 1,
    refresh: config.dashboardRefresh,
    time: { from: config.dashboardFrom, to: 'now' },
    timezone: '',
    templating: { list: $.variables(config.gymSelector, extraVariables) },
    annotations: { list: [] },
    // The other Gym dashboards, with the same time range and variables.
    links: [{
      type: 'dashboards',
      tags: [config.dashboardTags[0]],
      asDropdown: true,
      title: 'Gym dashboards',
      includeVars: true,
      keepTime: true,
    }],
    panels: [
      panels[i] { id: i + 1, gridPos: { h: 8, w: 12, x: (i % 2) * 12, y: std.floor(i / 2) * 8 } }
      for i in std.range(0, std.length(panels) - 1)
    ],
  },
}
