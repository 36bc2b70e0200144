// The verdict as recording rules (docs/verdict.md): where work waits on
// each host and why, ranked by gym:verdict:score — the rules of
// exporter/src/snapshot/verdict.h over a window of Prometheus' samples
// (_config.verdictWindow) — and Little's law as the instrument's own check
// (gym:littles_law_*:ratio, 1 when the counting is right).
local limit = 'job, instance, nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, nemo_gym_server_name';
local operation = 'job, instance, nemo_gym_resources_operation, nemo_gym_resources_executor, nemo_gym_server_name';
local server = 'job, instance, nemo_gym_server_name';
{
  prometheusRules+:: {
    local c = $._config { limit: limit, operation: operation, server: server, w: $._config.verdictWindow },
    // label_replace(e, name, value): e with one label set.
    local with(e, name, value) = 'label_replace(%s, "%s", "%s", "", "")' % [e, name, value],
    groups+: [{
      name: 'gym-verdict',
      rules: [
        // A limit's callers waiting, its held share of slots and its
        // stranded slots, on average over the window.
        {
          record: 'gym:verdict_limit_waiting:avg',
          expr: 'sum by (%(limit)s) (avg_over_time(gym_concurrency_queue_depth{%(gymSelector)s}[%(w)s]))' % c,
        },
        {
          record: 'gym:verdict_limit_saturation:avg',
          expr: |||
            sum by (%(limit)s) (avg_over_time(gym_concurrency_active{%(gymSelector)s}[%(w)s]))
            /
            sum by (%(limit)s) (avg_over_time(gym_concurrency_limit{%(gymSelector)s}[%(w)s]))
          ||| % c,
        },
        {
          record: 'gym:verdict_limit_stranded:avg',
          expr: 'sum by (%(limit)s) (avg_over_time(gym_concurrency_stranded_slots{%(gymSelector)s}[%(w)s]))' % c,
        },
        // A place where callers wait: a limit with callers waiting whose
        // slots are full or stranded.
        {
          record: 'gym:verdict_limit:waiting',
          expr: |||
            gym:verdict_limit_waiting:avg >= %(verdictMinWaiting)g
            and on (%(limit)s)
            (gym:verdict_limit_saturation:avg >= %(verdictSaturation)g or gym:verdict_limit_stranded:avg >= %(verdictStrandedSlots)g)
          ||| % c,
        },
        // An operation's callers waiting, and its queue time over its run time.
        {
          record: 'gym:verdict_operation_queued:avg',
          expr: 'sum by (%(operation)s) (avg_over_time(gym_resources_operation_queued{%(gymSelector)s}[%(w)s]))' % c,
        },
        {
          record: 'gym:verdict_operation_queue_over_run:ratio',
          expr: |||
            sum by (%(operation)s) (increase(gym_resources_operation_queue_duration_seconds_sum{%(gymSelector)s}[%(w)s]))
            /
            sum by (%(operation)s) (increase(gym_resources_operation_duration_seconds_sum{%(gymSelector)s}[%(w)s]))
          ||| % c,
        },
        // A server's trouble, each condition's severity (0 to 1): memory (an
        // OOM kill in its cgroups: 1; else its fullest GPU's used share), its
        // event loop (blocked seconds / 10 or lag p99 in seconds) and its CPU
        // (the share of CFS periods throttled).
        {
          record: 'gym:verdict_server_memory:severity',
          expr: |||
            (sum by (%(server)s) (increase(gym_server_cgroup_oom_kills_total{%(gymSelector)s}[%(w)s])) > 0) * 0 + 1
            or
            max by (%(server)s) (
              (gym_server_gpu_memory_bytes{%(gymSelector)s} > 0) * 0
              + on (job, instance, gpu) group_left ()
              (gym_gpu_memory_used_bytes{%(gymSelector)s} / gym_gpu_memory_total_bytes{%(gymSelector)s})
            ) >= %(verdictGpuMemoryRatio)g
          ||| % c,
        },
        {
          record: 'gym:verdict_server_loop:severity',
          expr: 'clamp_max(max by (%(server)s) (' % c
                + with('(max by (%(server)s) (gym_python_event_loop_blocked_seconds{%(gymSelector)s}) >= %(verdictLoopBlockedSeconds)g) / 10' % c, 'signal', 'blocked')
                + ' or '
                + with('histogram_quantile(0.99, sum by (%(server)s, le) (rate(gym_python_event_loop_lag_seconds_bucket{%(gymSelector)s}[%(w)s]))) >= %(verdictLoopLagP99Seconds)g' % c, 'signal', 'lag')
                + '), 1)',
        },
        {
          record: 'gym:verdict_server_cpu:severity',
          expr: |||
            sum by (%(server)s) (increase(gym_server_cgroup_cpu_throttled_periods_total{%(gymSelector)s}[%(w)s]))
            /
            sum by (%(server)s) (increase(gym_server_cgroup_cpu_periods_total{%(gymSelector)s}[%(w)s]))
            >= %(verdictThrottledShare)g
          ||| % c,
        },
        // The most telling condition of each server, its cause.
        {
          record: 'gym:verdict_server:severity',
          expr: std.join(' or ', [
            with('gym:verdict_server_memory:severity', 'cause', 'memory'),
            with('gym:verdict_server_loop:severity unless on (%(server)s) gym:verdict_server_memory:severity' % c, 'cause', 'blocked_event_loop'),
            with('gym:verdict_server_cpu:severity unless on (%(server)s) gym:verdict_server_memory:severity unless on (%(server)s) gym:verdict_server_loop:severity' % c, 'cause', 'starved_cpu'),
          ]),
        },
        // The entries, scored: callers waiting on average at a limit, then
        // at an operation of a server with no limit entry, then a tenth of
        // the severity of a server with neither. Each limit or operation
        // takes its server's cause, else its own.
        {
          record: 'gym:verdict_limit:score',
          expr: with(std.join(' or ', [
            with('gym:verdict_limit:waiting and on (%(limit)s) gym:verdict_limit_stranded:avg >= %(verdictStrandedSlots)g' % c, 'cause', 'stranded_slots'),
            '(gym:verdict_limit:waiting unless on (%(limit)s) gym:verdict_limit_stranded:avg >= %(verdictStrandedSlots)g) + on (%(server)s) group_left (cause) (0 * gym:verdict_server:severity)' % c,
            with('gym:verdict_limit:waiting unless on (%(limit)s) gym:verdict_limit_stranded:avg >= %(verdictStrandedSlots)g unless on (%(server)s) gym:verdict_server:severity' % c, 'cause', 'limit_too_small'),
          ]), 'place', 'limit'),
        },
        {
          local waiting = '((gym:verdict_operation_queued:avg >= %(verdictMinWaiting)g and on (%(operation)s) gym:verdict_operation_queue_over_run:ratio >= %(verdictQueueOverRun)g) unless on (%(server)s) gym:verdict_limit:score)' % c,
          record: 'gym:verdict_operation:score',
          expr: with(std.join(' or ', [
            waiting + ' + on (%(server)s) group_left (cause) (0 * gym:verdict_server:severity)' % c,
            with(waiting + ' unless on (%(server)s) gym:verdict_server:severity' % c, 'cause', 'queue_dominates'),
          ]), 'place', 'operation'),
        },
        // Every entry: the places, and the servers with neither.
        {
          record: 'gym:verdict:score',
          expr: 'gym:verdict_limit:score or gym:verdict_operation:score or '
                + with('0.1 * gym:verdict_server:severity unless on (%(server)s) gym:verdict_limit:score unless on (%(server)s) gym:verdict_operation:score' % c, 'place', 'server'),
        },
        // Little's law, per limit and operation: the mean number waiting
        // (held, active) over the window divided by the time waited (held,
        // run) per second; 1 when the counting is right (docs/verdict.md
        // derives the tolerance).
        {
          record: 'gym:littles_law_limit_waiting:ratio',
          expr: |||
            gym:verdict_limit_waiting:avg
            / on (%(limit)s)
            (sum by (%(limit)s) (rate(gym_concurrency_wait_duration_seconds_sum{%(gymSelector)s}[%(w)s])) > 0)
          ||| % c,
        },
        {
          record: 'gym:littles_law_limit_held:ratio',
          expr: |||
            sum by (%(limit)s) (avg_over_time(gym_concurrency_active{%(gymSelector)s}[%(w)s]))
            /
            (sum by (%(limit)s) (rate(gym_concurrency_hold_seconds_total{%(gymSelector)s}[%(w)s])) > 0)
          ||| % c,
        },
        {
          record: 'gym:littles_law_operation_queued:ratio',
          expr: |||
            gym:verdict_operation_queued:avg
            / on (%(operation)s)
            (sum by (%(operation)s) (rate(gym_resources_operation_queue_duration_seconds_sum{%(gymSelector)s}[%(w)s])) > 0)
          ||| % c,
        },
        {
          record: 'gym:littles_law_operation_active:ratio',
          expr: |||
            sum by (%(operation)s) (avg_over_time(gym_resources_operation_active{%(gymSelector)s}[%(w)s]))
            /
            (sum by (%(operation)s) (rate(gym_resources_operation_duration_seconds_sum{%(gymSelector)s}[%(w)s])) > 0)
          ||| % c,
        },
      ],
    }],
  },
}
