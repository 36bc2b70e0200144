// Alerts. Each has a runbook_url (runbookURLPattern) to its section of
// docs/runbook.md, which says what it means, how to confirm it and what to do.
local limit = 'job, instance, nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, nemo_gym_server_name';
local server = 'job, instance, nemo_gym_server_name, nemo_gym_server_type';

// A duration in seconds as Prometheus and people write it.
local minutes(s) = if s % 60 == 0 then '%dm' % (s / 60) else '%ds' % s;
local plural(n, unit) = '%d %s%s' % [n, unit, if n == 1 then '' else 's'];
local asText(s) =
  if s % 3600 == 0 then plural(s / 3600, 'hour')
  else if s % 60 == 0 then plural(s / 60, 'minute')
  else plural(s, 'second');
// Seconds in a Prometheus duration of one unit: 30s, 5m, 1h.
local seconds(d) =
  local n = std.parseInt(std.substr(d, 0, std.length(d) - 1)), u = d[std.length(d) - 1];
  n * { s: 1, m: 60, h: 3600 }[u];
local percent(r) = '%g%%' % (r * 100);

{
  local alert(name, severity, expr, annotations, forTime=null) = {
    alert: name,
    expr: expr,
    labels: { severity: severity },
    annotations: { runbook_url: $._config.runbookURLPattern % std.asciiLower(name) } + annotations,
  } + (if forTime == null then {} else { 'for': forTime }),

  prometheusAlerts+:: {
    local c = $._config { limit: limit, server: server },
    local outcomes = $.rateRecord('resources_operation_outcomes'),
    local byServer = $.rateRecord('resources_operations_by_server'),
    groups+: [
      {
        name: 'gym-alerts',
        rules: [
          alert('GymConcurrencyLimitFullAndQueueGrowing', 'warning', |||
            gym:concurrency_saturation:ratio >= 1
            and on (%(limit)s)
            (
              sum by (%(limit)s) (delta(gym_concurrency_queue_depth{%(gymSelector)s}[%(window)s])) > 0
            )
          ||| % c { window: minutes(c.queueGrowingSeconds) }, {
            summary: 'Concurrency limit {{ $labels.nemo_gym_concurrency_limit_name }} on {{ $labels.instance }} is full and its queue keeps growing',
            description: 'Every slot of {{ $labels.nemo_gym_concurrency_component }}/{{ $labels.nemo_gym_concurrency_limit_name }} has been held for %s while callers piled up behind it. Work is waiting on this limit: raise it, or find what holds the slots.' % asText(c.queueGrowingSeconds),
          }, minutes(c.queueGrowingSeconds)),
          alert('GymConcurrencyHoldStuck', 'warning', |||
            max by (%(limit)s) (gym_concurrency_oldest_hold_seconds{%(gymSelector)s}) > %(holdStuckSeconds)g
            and on (%(limit)s)
            sum by (%(limit)s) (increase(gym_concurrency_admissions_total{%(gymSelector)s}[%(window)s])) == 0
          ||| % c { window: minutes(c.holdStuckSeconds) }, {
            summary: 'A slot of {{ $labels.nemo_gym_concurrency_limit_name }} on {{ $labels.instance }} has been held for over %s and nothing was admitted since' % asText(c.holdStuckSeconds),
            description: 'The oldest holder of {{ $labels.nemo_gym_concurrency_component }}/{{ $labels.nemo_gym_concurrency_limit_name }} has held its slot for {{ $value | humanizeDuration }} while no caller got a slot for %s: work is not flowing through this limit, and the holders may be wedged.' % asText(c.holdStuckSeconds),
          }, '5m'),
          alert('GymConcurrencySlotsStranded', 'warning', |||
            max by (%(limit)s) (gym_concurrency_stranded_slots{%(gymSelector)s}) > 0
          ||| % c, {
            summary: 'Free slots of {{ $labels.nemo_gym_concurrency_limit_name }} on {{ $labels.instance }} sit in one process while another queues',
            description: '{{ $value | humanize }} slots of {{ $labels.nemo_gym_concurrency_component }}/{{ $labels.nemo_gym_concurrency_limit_name }} have been free in processes with no caller waiting for %s, while callers queue in another process of the same limit: the load balancer in front of the processes, not the limit, holds the work back.' % asText(c.strandedSlotsSeconds),
          }, minutes(c.strandedSlotsSeconds)),
          alert('GymConcurrencyWaitGrowing', 'warning', |||
            max by (%(limit)s) (gym_concurrency_oldest_wait_seconds{%(gymSelector)s}) > %(waitGrowingSeconds)g
            and on (%(limit)s)
            max by (%(limit)s) (deriv(gym_concurrency_oldest_wait_seconds{%(gymSelector)s}[10m])) > 0.5
          ||| % c, {
            summary: 'The oldest caller waiting for {{ $labels.nemo_gym_concurrency_limit_name }} on {{ $labels.instance }} keeps waiting longer',
            description: 'The longest wait for a slot of {{ $labels.nemo_gym_concurrency_component }}/{{ $labels.nemo_gym_concurrency_limit_name }} is {{ $value | humanizeDuration }} and has grown for 10 minutes: the queue is not served.',
          }, '10m'),
          alert('GymAdmissionTimeouts', 'warning', |||
            sum by (%(limit)s) (increase(gym_concurrency_admission_timeouts_total{%(gymSelector)s}[5m])) > 0
          ||| % c, {
            summary: 'Waits for {{ $labels.nemo_gym_concurrency_limit_name }} on {{ $labels.instance }} run out of their admission timeout',
            description: '{{ $value | humanize }} callers gave up waiting for a slot of {{ $labels.nemo_gym_concurrency_component }}/{{ $labels.nemo_gym_concurrency_limit_name }} in the last 5 minutes.',
          }, '5m'),
          // Operation alerts are per server (and, for latency, per
          // operation), not per executor or outcome series, and need some
          // volume: a handful of operations cannot make a ratio worth waking
          // anyone.
          alert('GymResourcesOperationSlow', 'warning', |||
            gym:resources_operation_duration_seconds:p99_%(ruleRateInterval)s > %(operationSlowSeconds)g
            and on (job, instance, nemo_gym_resources_operation, nemo_gym_server_name)
            sum by (job, instance, nemo_gym_resources_operation, nemo_gym_server_name) (%(outcomes)s) >= 1/60
          ||| % c { outcomes: outcomes }, {
            summary: '{{ $labels.nemo_gym_resources_operation }} operations of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} take over %s at p99' % asText(c.operationSlowSeconds),
            description: 'The 99th percentile of {{ $labels.nemo_gym_resources_operation }} run time on {{ $labels.nemo_gym_server_name }} is {{ $value | humanizeDuration }}.',
          }, '15m'),
          alert('GymResourcesOperationErrors', 'warning', |||
            %(ratio)s > %(operationErrorRatio)g
            and on (job, instance, nemo_gym_server_name)
            %(byServer)s >= %(operationMinRate)g
          ||| % c { ratio: $.rateRecord('resources_operation_error_ratio_by_server'), byServer: byServer }, {
            summary: 'Over %s of the resources operations of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} fail' % percent(c.operationErrorRatio),
            description: '{{ $value | humanizePercentage }} of the operations of {{ $labels.nemo_gym_server_name }} ended in error or crashed over %s (at least %g operations in that time). The Gym resources operations dashboard shows which operation and executor.' % [asText(seconds(c.ruleRateInterval)), c.operationMinRate * seconds(c.ruleRateInterval)],
          }, '10m'),
          alert('GymResourcesOperationTimeouts', 'warning', |||
            %(ratio)s > %(operationTimeoutRatio)g
            and on (job, instance, nemo_gym_server_name)
            %(byServer)s >= %(operationMinRate)g
          ||| % c { ratio: $.rateRecord('resources_operation_timeout_ratio_by_server'), byServer: byServer }, {
            summary: 'Over %s of the resources operations of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} time out' % percent(c.operationTimeoutRatio),
            description: '{{ $value | humanizePercentage }} of the operations of {{ $labels.nemo_gym_server_name }} timed out over %s (at least %g operations in that time).' % [asText(seconds(c.ruleRateInterval)), c.operationMinRate * seconds(c.ruleRateInterval)],
          }, '10m'),
          alert('GymServerMemoryNearHost',
                'critical',
                'gym:server_memory_host_share:ratio > %(serverHostMemoryShare)g' % c,
                {
                  summary: "{{ $labels.nemo_gym_server_name }} uses over %s of {{ $labels.instance }}'s memory" % percent(c.serverHostMemoryShare),
                  description: "The process tree of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) holds {{ $value | humanizePercentage }} of the host's memory.",
                },
                '5m'),
          // A server's memory grows fast enough to take all the host's
          // available memory within the horizon (a linear fit over 30
          // minutes).
          alert('GymServerMemoryGrowthExhaustsHost', 'warning', |||
            (
              predict_linear(gym_server_memory_usage_bytes{%(gymSelector)s, memory_type="rss"}[30m], %(memoryGrowthHorizonSeconds)g)
              - gym_server_memory_usage_bytes{%(gymSelector)s, memory_type="rss"}
            )
            > on (job, instance) group_left
            gym_host_memory_available_bytes{%(gymSelector)s}
          ||| % c, {
            summary: "{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} grows towards the host's memory limit",
            description: 'At its growth of the last 30 minutes, the process tree of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) would take {{ $value | humanize1024 }}B more within %s: more than the host has available.' % asText(c.memoryGrowthHorizonSeconds),
          }, '10m'),
          // A configured server whose process is not found (declared servers
          // that exit leave after memory.gone_server_ttl_seconds, 5 minutes
          // by default).
          alert('GymServerDown', 'warning', 'gym_server_up{%(gymSelector)s} == 0' % c, {
            summary: '{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} is down',
            description: 'The root process of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) has not been found for 10 minutes: gone, or its pidfile is unreadable or stale.',
          }, '10m'),
          // The kernel's OOM killer killed a process of a server: any
          // process of it, from the kernel's events where the exporter has
          // them; else in its own cgroup (the server may have survived: a
          // verifier, a worker), or the server's root process itself.
          alert('GymServerOOMKilled', 'warning', |||
            sum by (%(server)s) (
              increase(gym_server_process_exits_total{%(gymSelector)s, reason="oom_kill"}[10m])
            ) > 0
            or
            sum by (%(server)s) (
              increase(gym_server_exits_total{%(gymSelector)s, reason="oom_kill"}[10m])
            ) > 0
            or
            sum by (%(server)s) (
              increase(gym_server_cgroup_oom_kills_total{%(gymSelector)s, kind="process"}[10m])
            ) > 0
          ||| % c, {
            summary: 'The OOM killer killed a process of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }}',
            description: "{{ $value | humanize }} OOM kills in the last 10 minutes in {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}): the memory limit of its cgroup (or its sandbox's) is too small for its work.",
          }),
          // A sandbox's cgroup killed whole (memory.oom.group, cgroup v2):
          // every process in it died at once, and the cgroup is usually
          // removed right after; its kill still counts for the server.
          alert('GymSandboxOomKilled', 'warning', |||
            sum by (%(server)s) (
              increase(gym_server_cgroup_oom_kills_total{%(gymSelector)s, kind="group"}[10m])
            ) > 0
          ||| % c, {
            summary: 'A sandbox of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} was OOM-killed whole',
            description: "{{ $value | humanize }} cgroups of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) were killed whole by the OOM killer in the last 10 minutes: a sandbox's memory limit is too small for the work sent to it.",
          }),
          // Processes of a server keep dying of a signal other than the OOM
          // killer's: crashes (SIGSEGV, SIGABRT), or kills from outside (a
          // neighbour's pkill, a timeout's SIGKILL).
          alert('GymServerProcessesCrashing', 'warning', |||
            sum by (%(server)s) (
              increase(gym_server_process_exits_total{%(gymSelector)s, reason="signal"}[%(window)s])
            ) > %(processCrashes)g
          ||| % c { window: minutes(c.processDeathWindowSeconds) }, {
            summary: 'Processes of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} keep dying of signals',
            description: '{{ $value | humanize }} processes of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) were killed by a signal other than the OOM killer in the last %s (threshold %g): crashes, or kills from outside. /api/v1/deaths?server={{ $labels.nemo_gym_server_name }}&reason=signal on the exporter lists them with their signals.' % [asText(c.processDeathWindowSeconds), c.processCrashes],
          }),
          // A process of a server other than its roots has lived far longer
          // than a verifier or sandbox should: leaked (its caller timed out
          // and never killed it), holding memory, CPU, maybe a slot.
          alert('GymServerProcessLeaked', 'warning', |||
            max by (%(server)s) (gym_server_oldest_process_seconds{%(gymSelector)s}) > %(oldestProcessSeconds)g
          ||| % c, {
            summary: '{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} has a process older than %s' % asText(c.oldestProcessSeconds),
            description: 'The oldest process of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) other than its roots is {{ $value | humanizeDuration }} old (threshold %s): a verifier or sandbox left running.' % asText(c.oldestProcessSeconds),
          }, '10m'),
          // A server's cgroup near its memory limit (usage counts page
          // cache, which the kernel reclaims first: hence the long for).
          alert('GymServerCpuThrottled', 'warning', |||
            sum by (%(server)s) (rate(gym_server_cgroup_cpu_throttled_periods_total{%(gymSelector)s}[10m]))
            / sum by (%(server)s) (rate(gym_server_cgroup_cpu_periods_total{%(gymSelector)s}[10m]))
            > %(cpuThrottledRatio)g
          ||| % c, {
            summary: "{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} runs out of its cgroups' CPU quota",
            description: "The cpu cgroups of {{ $labels.nemo_gym_server_name }}'s processes (its sandboxes') were throttled in {{ $value | humanizePercentage }} of their CFS periods over 10 minutes (threshold %s): its work runs slower than it asks to." % percent(c.cpuThrottledRatio),
          }, '10m'),
          alert('GymServerCgroupMemoryNearLimit', 'warning', |||
            gym_server_cgroup_memory_usage_bytes{%(gymSelector)s}
            / on (%(server)s)
            gym_server_cgroup_memory_limit_bytes{%(gymSelector)s}
            > %(cgroupMemoryLimitShare)g
          ||| % c, {
            summary: "{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} is near its cgroup's memory limit",
            description: 'The cgroup of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) has used {{ $value | humanizePercentage }} of its memory limit for 15 minutes.',
          }, '15m'),
          // Tasks of a server's cgroup all stall on memory (reclaim, swap-in)
          // a tenth of the time: it runs, but slowly (cgroup v2 only).
          alert('GymServerMemoryPressure',
                'warning',
                'gym_server_cgroup_memory_pressure_ratio{%(gymSelector)s, kind="full", window="60s"} > %(memoryPressureFullRatio)g' % c,
                {
                  summary: '{{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} stalls on memory',
                  description: 'All tasks of {{ $labels.nemo_gym_server_name }} ({{ $labels.nemo_gym_server_type }}) were stalled waiting for memory {{ $value | humanizePercentage }} of the last minute, for 10 minutes.',
                },
                '10m'),
          // A GPU nearly full for 10 minutes: the next allocation (a KV cache
          // block, a batch) fails. vLLM reserves gpu_memory_utilization (0.9
          // by default) of a GPU up front, so the threshold is above that;
          // GPUs under 1 GiB (none that serves a model) are left out.
          alert('GymGpuMemoryNearlyFull', 'warning', |||
            gym_gpu_memory_used_bytes{%(gymSelector)s}
            / on (job, instance, gpu)
            (gym_gpu_memory_total_bytes{%(gymSelector)s} > 2^30)
            > %(gpuMemoryFullRatio)g
          ||| % c, {
            summary: 'GPU {{ $labels.gpu }} on {{ $labels.instance }} is nearly full',
            description: 'GPU {{ $labels.gpu }} has {{ $value | humanizePercentage }} of its memory in use, for 10 minutes; gym_server_gpu_memory_bytes says which server holds it, gym_gpu_memory_unattributed_bytes what no server does.',
          }, '10m'),
          // A Python server's event loop that has not run its heartbeat for
          // a minute: a synchronous call (an inline verifier, a blocking
          // client), a long GC pause or a deadlock holds the loop, and every
          // request the server has waits. Seconds-long blocks (the demo's)
          // stay quiet.
          alert('GymEventLoopBlocked', 'warning', |||
            max by (job, instance, nemo_gym_server_name) (gym_python_event_loop_blocked_seconds{%(gymSelector)s}) > %(eventLoopBlockedSeconds)g
          ||| % c, {
            summary: 'The event loop of {{ $labels.nemo_gym_server_name }} on {{ $labels.instance }} is blocked',
            description: 'The event loop of {{ $labels.nemo_gym_server_name }} has not run for {{ $value | humanizeDuration }}: one callback holds it (a synchronous call, a CPU-bound verifier run inline, a long garbage collection), and nothing else in that server runs meanwhile. py-spy dump --pid of its process shows where.',
          }),
        ],
      },
      {
        name: 'gym-exporter',
        rules: [
          alert('GymExporterDown', 'critical', 'up{%(gymSelector)s} == 0' % c, {
            summary: 'gym-exporter on {{ $labels.instance }} cannot be scraped',
            description: 'Prometheus has failed to scrape {{ $labels.instance }} ({{ $labels.job }}) for 5 minutes: no Gym metrics from that host.',
          }, '5m'),
          // No gym target at all.
          alert('GymExporterAbsent', 'warning', 'absent(up{%(gymSelector)s})' % c, {
            summary: 'No gym-exporter target is known to Prometheus',
            description: 'No target matching up{%s} has existed for 10 minutes: service discovery or the scrape configuration lost every Gym host.' % c.gymSelector,
          }, '10m'),
          alert('GymRegistrySeriesDropped', 'warning', |||
            sum by (job, instance) (increase(gym_exporter_registry_dropped_series_total{%(gymSelector)s}[10m])) > 0
          ||| % c, {
            summary: 'Gym servers on {{ $labels.instance }} could not register {{ $value | humanize }} series',
            description: "A writer's segment is full: series registered after that are not counted. Fewer distinct label values, or a larger segment, fixes it.",
          }),
          alert('GymRegistrySegmentsRejected', 'warning', |||
            sum by (job, instance) (increase(gym_exporter_registry_rejected_segments_total{%(gymSelector)s}[10m])) > 0
          ||| % c, {
            summary: 'gym-exporter on {{ $labels.instance }} rejected {{ $value | humanize }} registry files',
            description: "Files in the registry directory were not valid segments, or were owned by an untrusted user: their writers' metrics are missing. The exporter's log names each.",
          }),
          alert('GymCollectorSampleErrors', 'warning', |||
            sum by (job, instance, collector, reason) (increase(gym_exporter_collector_sample_errors_total{%(gymSelector)s}[10m])) > 0
          ||| % c, {
            summary: 'The {{ $labels.collector }} samples on {{ $labels.instance }} keep failing ({{ $labels.reason }})',
            description: "{{ $value | humanize }} reads failed ({{ $labels.reason }}) in the {{ $labels.collector }} collector's samples in 10 minutes, for 20 minutes: some servers' numbers are missing (or, for memory, RSS-only). The exporter's log names each.",
          }, '20m'),
          alert('GymCollectorSampleOverruns', 'warning', |||
            sum by (job, instance, collector) (increase(gym_exporter_collector_sample_overruns_total{%(gymSelector)s}[10m])) > 0
          ||| % c, {
            summary: 'The {{ $labels.collector }} samples on {{ $labels.instance }} take longer than their interval',
            description: "Samples keep running past the next one's start: {{ $labels.collector }}.interval_seconds is too short for this host (for memory, PSS may be read for too many large processes).",
          }, '20m'),
        ],
      },
    ],
  },
}
