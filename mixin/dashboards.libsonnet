// The three Grafana dashboards: concurrency limits, resources operations,
// and memory (with CPU, GPU, exits and the Python runtime, per server).
local g = import 'lib/grafana.libsonnet';

local BASE = 'job=~"$job", instance=~"$instance"';
local LIMIT = 'nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, nemo_gym_server_name';
local OP = 'nemo_gym_resources_operation, nemo_gym_resources_executor';
local SERVER = 'nemo_gym_server_name, nemo_gym_server_type';

{
  grafanaDashboards+:: {
    local c = $._config,
    local panel = g.panel,
    local rateOf(sel) = function(metric) 'rate(%s{%s}[%s])' % [metric, sel, c.dashboardRateInterval],
    local increaseOf(sel) = function(metric) 'increase(%s{%s}[%s])' % [metric, sel, c.dashboardRateInterval],

    'gym-concurrency.json':
      local SEL = BASE + ', nemo_gym_concurrency_component=~"$component", nemo_gym_concurrency_limit_name=~"$limit", nemo_gym_server_name=~"$server"';
      local rate = rateOf(SEL);
      local s = { SEL: SEL, LIMIT: LIMIT };
      local byLimit(metric) = 'sum by (%s) (%s{%s})' % [LIMIT, metric, SEL];
      local perLimit = '{{nemo_gym_concurrency_component}}/{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}';
      g.dashboard(c,
                  'gym-concurrency',
                  'Gym / Concurrency limits',
                  'Every concurrency limit: its slots, who holds them and who waits.',
                  [
                    panel('Verdict: where work waits, ranked', 'short', [
                      ['sort_desc(gym:verdict:score{%s})' % BASE, ''],
                    ], kind='table', instant=true, description="The bottleneck verdict (docs/verdict.md): every place where callers wait (score: callers waiting on average over the rules' window) and every server in trouble with nobody waiting on it (a tenth of its severity), with its cause; the first row is the bottleneck. The same rules as gym-stat's first line and /api/v1/snapshot's verdict."),
                    panel("Little's law: mean number over time per second", 'short', [
                      ['gym:littles_law_limit_waiting:ratio{%s}' % BASE, 'waiting {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}'],
                      ['gym:littles_law_limit_held:ratio{%s}' % BASE, 'held {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}'],
                      ['gym:littles_law_operation_queued:ratio{%s}' % BASE, 'queued {{nemo_gym_resources_operation}}/{{nemo_gym_resources_executor}} {{nemo_gym_server_name}} {{instance}}'],
                      ['gym:littles_law_operation_active:ratio{%s}' % BASE, 'active {{nemo_gym_resources_operation}}/{{nemo_gym_resources_executor}} {{nemo_gym_server_name}} {{instance}}'],
                    ], description="The instrument's own check: each limit's and operation's mean number waiting (held, active) over the rules' window divided by the time waited (held, run) per second. 1 when the counting is right; a line that strays and stays is a bug in the counting, a slot held outside the instrumentation, or a caller that bypasses it (docs/verdict.md derives how far chance takes it)."),
                    panel('Limit, active and queued', 'short', [
                      [byLimit('gym_concurrency_limit'), 'limit {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}'],
                      [byLimit('gym_concurrency_active'), 'active {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}'],
                      [byLimit('gym_concurrency_queue_depth'), 'queued {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}'],
                    ], description='Summed over the selected hosts.'),
                    panel('Saturation', 'percentunit', [
                      ['%s / %s' % [byLimit('gym_concurrency_active'), byLimit('gym_concurrency_limit')], perLimit],
                    ], description='Share of slots held; 100% with a queue means work waits on this limit.'),
                    panel('Most saturated limits, per host', 'percentunit', [
                      [
                        'topk(5, sum by (instance, %(LIMIT)s) (gym_concurrency_active{%(SEL)s}) / sum by (instance, %(LIMIT)s) (gym_concurrency_limit{%(SEL)s}))' % s,
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                    ], description='The five limits with the largest share of slots held on one host: a limit full on one host can hide in a sum over many.'),
                    panel('Longest queues, per host', 'short', [
                      [
                        'topk(5, sum by (instance, %(LIMIT)s) (gym_concurrency_queue_depth{%(SEL)s}))' % s,
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                    ]),
                    panel('Queue depth', 'short', [[byLimit('gym_concurrency_queue_depth'), perLimit]], stack=true),
                    panel('Free slots', 'short', [[byLimit('gym_concurrency_available'), perLimit]]),
                    panel('Stranded slots and processes, per host', 'short', [
                      [
                        'max by (instance, %(LIMIT)s) (gym_concurrency_stranded_slots{%(SEL)s})' % s,
                        'stranded {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                      [
                        'max by (instance, %(LIMIT)s) (gym_concurrency_processes{%(SEL)s})' % s,
                        'processes {{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                    ], description='A limit opened by several processes (uvicorn --workers, forked servers) is summed over them. Stranded: free slots in processes with no caller queued while another process of the limit has callers queued. Not a limit too small: the load balancer in front of the processes sends work to the wrong one.'),
                    panel('Oldest hold', 's', [
                      [
                        'max by (instance, %(LIMIT)s) (gym_concurrency_oldest_hold_seconds{%(SEL)s})' % s,
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                    ], description='How long the longest-held slot of each limit has been held, per host. A line that keeps climbing while admissions stay flat is a wedged holder.'),
                    panel('Oldest wait', 's', [
                      [
                        'max by (instance, %(LIMIT)s) (gym_concurrency_oldest_wait_seconds{%(SEL)s})' % s,
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}} {{instance}}',
                      ],
                    ], description='How long the longest-waiting caller of each limit has waited, per host.'),
                    panel('Admissions', 'ops', [
                      [
                        'sum by (%s) (%s)' % [LIMIT, rate('gym_concurrency_admissions_total')],
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}',
                      ],
                    ], description='Callers that got a slot, per second: the flow through each limit.'),
                    panel('Wait p99', 's', [
                      [
                        'histogram_quantile(0.99, sum by (le, %s) (%s))' % [LIMIT, rate('gym_concurrency_wait_duration_seconds_bucket')],
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}',
                      ],
                    ], description='99th percentile of the waits for a slot, timed out and cancelled ones included; a point of a traced wait links to its trace.', exemplars=true),
                    panel('Admission timeouts', 'ops', [
                      [
                        'sum by (%s) (%s)' % [LIMIT, rate('gym_concurrency_admission_timeouts_total')],
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}',
                      ],
                    ], description='Waits that ran out of the admission timeout, per second.'),
                    panel('Admission cancellations', 'ops', [
                      [
                        'sum by (%s) (%s)' % [LIMIT, rate('gym_concurrency_admission_cancelled_total')],
                        '{{nemo_gym_concurrency_limit_name}} {{nemo_gym_server_name}}',
                      ],
                    ], description='Waits cancelled before a slot was free, per second.'),
                  ],
                  [
                    g.labelVariable('component', 'Component', 'gym_concurrency_limit', 'nemo_gym_concurrency_component', BASE),
                    g.labelVariable('limit', 'Limit', 'gym_concurrency_limit', 'nemo_gym_concurrency_limit_name', BASE),
                    g.labelVariable('server', 'Server', 'gym_concurrency_limit', 'nemo_gym_server_name', BASE),
                  ]),

    'gym-resources-operations.json':
      local SEL = BASE + ', nemo_gym_resources_operation=~"$operation", nemo_gym_server_name=~"$server"';
      local rate = rateOf(SEL);
      local s = { SEL: SEL, OP: OP };
      local quantiles(family) = [
        [
          'histogram_quantile(%g, sum by (le, %s) (%s))' % [q, OP, rate(family + '_bucket')],
          'p%d {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}}' % (q * 100 + 0.5),
        ]
        for q in [0.5, 0.9, 0.99]
      ];
      g.dashboard(c,
                  'gym-resources-operations',
                  'Gym / Resources operations',
                  'Bounded work of resources servers: how long it queued, ran, and how it ended.',
                  [
                    panel('Queue time quantiles', 's', quantiles('gym_resources_operation_queue_duration_seconds')),
                    panel('Run time quantiles', 's', quantiles('gym_resources_operation_duration_seconds'), description='A point of a traced operation links to its trace.', exemplars=true),
                    panel('Queue time', 's', [['sum by (le) (%s)' % rate('gym_resources_operation_queue_duration_seconds_bucket'), '{{le}}']], kind='heatmap'),
                    panel('Run time', 's', [['sum by (le) (%s)' % rate('gym_resources_operation_duration_seconds_bucket'), '{{le}}']], kind='heatmap', exemplars=true),
                    panel('Outcomes', 'ops', [
                      [
                        'sum by (nemo_gym_resources_operation_outcome) (%s)' % rate('gym_resources_operation_duration_seconds_count'),
                        '{{nemo_gym_resources_operation_outcome}}',
                      ],
                    ], stack=true, description='Finished operations per second, by outcome.'),
                    panel('Oldest queued and running', 's', [
                      [
                        'max by (instance, %(OP)s) (gym_resources_operation_oldest_queued_seconds{%(SEL)s})' % s,
                        'queued {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} {{instance}}',
                      ],
                      [
                        'max by (instance, %(OP)s) (gym_resources_operation_oldest_active_seconds{%(SEL)s})' % s,
                        'running {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} {{instance}}',
                      ],
                    ], description='Age of the longest-waiting and the longest-running operation, per host: a stuck operation shows here long before it records a duration.'),
                    panel('Slowest operations (p99 run time)', 's', [
                      [
                        'topk(5, histogram_quantile(0.99, sum by (le, %s, nemo_gym_server_name) (%s)))' % [OP, rate('gym_resources_operation_duration_seconds_bucket')],
                        '{{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}} {{nemo_gym_server_name}}',
                      ],
                    ], description='The five operations with the longest 99th percentile run time; a point of a traced operation links to its trace.', exemplars=true),
                    panel('Queued and running', 'short', [
                      [
                        'sum by (%(OP)s) (gym_resources_operation_queued{%(SEL)s})' % s,
                        'queued {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}}',
                      ],
                      [
                        'sum by (%(OP)s) (gym_resources_operation_active{%(SEL)s})' % s,
                        'running {{nemo_gym_resources_operation}} {{nemo_gym_resources_executor}}',
                      ],
                    ]),
                  ],
                  [
                    g.labelVariable('operation', 'Operation', 'gym_resources_operation_queued', 'nemo_gym_resources_operation', BASE),
                    g.labelVariable('server', 'Server', 'gym_resources_operation_queued', 'nemo_gym_server_name', BASE),
                  ]),

    'gym-memory.json':
      local SEL = BASE + ', nemo_gym_server_name=~"$server"';
      local HOST = BASE;  // host-wide series have no server
      local rate = rateOf(SEL);
      local increase = increaseOf(SEL);
      local s = { SEL: SEL, HOST: HOST, SERVER: SERVER, hostOoms: increaseOf(HOST)('gym_host_oom_kills_total') };
      local perServerHost = '{{nemo_gym_server_name}} {{instance}}';
      g.dashboard(c,
                  'gym-memory',
                  'Gym / Memory',
                  "Memory of every Gym server's whole process tree, and of the host.",
                  [
                    panel('Server RSS', 'bytes', [
                      ['sum by (%(SERVER)s) (gym_server_memory_usage_bytes{%(SEL)s, memory_type="rss"})' % s, '{{nemo_gym_server_name}}'],
                      ['max by (%(SERVER)s) (gym_server_memory_sampled_peak_bytes{%(SEL)s, memory_type="rss"})' % s, 'peak {{nemo_gym_server_name}}'],
                    ]),
                    panel('Server PSS', 'bytes', [
                      ['sum by (%(SERVER)s) (gym_server_memory_usage_bytes{%(SEL)s, memory_type="pss"})' % s, '{{nemo_gym_server_name}}'],
                      ['max by (%(SERVER)s) (gym_server_memory_sampled_peak_bytes{%(SEL)s, memory_type="pss"})' % s, 'peak {{nemo_gym_server_name}}'],
                    ], description='Proportional set size: shared pages split between the processes sharing them.'),
                    panel('Largest servers (RSS), per host', 'bytes', [
                      ['topk(5, max by (instance, %(SERVER)s) (gym_server_memory_usage_bytes{%(SEL)s, memory_type="rss"}))' % s, perServerHost],
                    ]),
                    panel('CPU per server', 'percentunit', [
                      ['sum by (instance, %s) (%s)' % [SERVER, rate('gym_server_cpu_seconds_total')], perServerHost],
                    ], description="Cores used by each server's process tree, reaped children included."),
                    panel('Throttled share of CPU periods per server', 'percentunit', [
                      [
                        'sum by (instance, %s) (%s) / sum by (instance, %s) (%s) > 0' % [SERVER, rate('gym_server_cgroup_cpu_throttled_periods_total'), SERVER, rate('gym_server_cgroup_cpu_periods_total')],
                        perServerHost,
                      ],
                    ], description="Over the cpu cgroups of each server's processes (its sandboxes' too): the share of CFS periods in which they ran out of their quota (gym_server_cgroup_cpu_limit_cores). A sandbox throttled most of the time runs its tools at a fraction of their speed and is often OOM-killed next."),
                    panel('CPU used and allowed per server', 'short', [
                      ['sum by (instance, %s) (%s)' % [SERVER, rate('gym_server_cpu_seconds_total')], 'used ' + perServerHost],
                      ['max by (instance, %(SERVER)s) (gym_server_cgroup_cpu_limit_cores{%(SEL)s})' % s, 'allowed ' + perServerHost],
                    ], description="Cores each server's process tree uses, and the cores its cpu cgroups' quotas allow, summed over them (absent without a quota)."),
                    panel('Pressure stalls per server', 'percentunit', [
                      ['sum by (instance, %s) (%s)' % [SERVER, rate('gym_server_cgroup_%s_pressure_seconds_total' % r)], r + ' ' + perServerHost]
                      for r in ['cpu', 'memory', 'io']
                    ], description="Share of wall time some task of each server's cgroups stalled waiting for CPU, memory or IO (kind some and full summed: PSI, cgroup v2 only). CPU stalls beside a low throttled share: the host is full, not the quota."),
                    panel('Host pressure stalls', 'percentunit', [
                      ['sum by (instance, resource) (rate(gym_host_pressure_seconds_total{%s, kind="some"}[%s]))' % [HOST, c.dashboardRateInterval], '{{resource}} {{instance}}'],
                    ], description='Share of wall time some task of the host stalled waiting for each resource (/proc/pressure).'),
                    panel("OOM kills in servers' cgroups, by kind", 'short', [
                      ['sum by (instance, %s, kind) (%s)' % [SERVER, increase('gym_server_cgroup_oom_kills_total')], '{{nemo_gym_server_name}} {{kind}} {{instance}}'],
                    ], description="Over every cgroup of each server's processes, removed ones included: process (the OOM killer killed a process) and group (a sandbox's cgroup was killed whole, oom_group_kill, v2)."),
                    panel('Oldest process per server', 's', [
                      ['max by (instance, %(SERVER)s) (gym_server_oldest_process_seconds{%(SEL)s})' % s, perServerHost],
                    ], description="Age of each server's oldest process other than its roots: a verifier or sandbox that normally lives seconds and is hours old has leaked (GymServerProcessLeaked)."),
                    panel('Processes per server', 'short', [
                      ['sum by (%(SERVER)s) (gym_server_processes{%(SEL)s})' % s, '{{nemo_gym_server_name}}'],
                    ]),
                    panel('Host memory', 'bytes', [
                      ['sum by (instance) (gym_host_memory_usage_bytes{%(HOST)s})' % s, 'used {{instance}}'],
                      ['sum by (instance) (gym_host_memory_available_bytes{%(HOST)s})' % s, 'available {{instance}}'],
                      ['sum by (instance) (gym_host_memory_total_bytes{%(HOST)s})' % s, 'total {{instance}}'],
                      ['max by (instance) (gym_host_memory_sampled_peak_bytes{%(HOST)s})' % s, 'peak used {{instance}}'],
                    ]),
                    panel("Servers' share of host memory", 'percentunit', [
                      [
                        'max by (instance, %(SERVER)s) (gym_server_memory_usage_bytes{%(SEL)s, memory_type="rss"}) / on (instance) group_left sum by (instance) (gym_host_memory_total_bytes{%(HOST)s})' % s,
                        perServerHost,
                      ],
                    ]),
                    panel("Servers' cgroups", 'bytes', [
                      ['sum by (instance, %(SERVER)s) (gym_server_cgroup_memory_usage_bytes{%(SEL)s})' % s, perServerHost],
                      ['max by (instance, %(SERVER)s) (gym_server_cgroup_memory_peak_bytes{%(SEL)s})' % s, 'peak ' + perServerHost],
                      ['max by (instance, %(SERVER)s) (gym_server_cgroup_memory_limit_bytes{%(SEL)s})' % s, 'limit ' + perServerHost],
                    ], description='Memory charged to the cgroup of each server that has one of its own (page cache included), its peak and its limit.'),
                    panel('GPU memory by server, per GPU', 'bytes', [
                      ['sum by (instance, %(SERVER)s, gpu) (gym_server_gpu_memory_bytes{%(SEL)s})' % s, '{{nemo_gym_server_name}} GPU {{gpu}} {{instance}}'],
                      ['max by (instance, %(SERVER)s, gpu) (gym_server_gpu_memory_sampled_peak_bytes{%(SEL)s})' % s, 'peak {{nemo_gym_server_name}} GPU {{gpu}} {{instance}}'],
                    ], description="GPU memory (NVML) held by each server's processes on each GPU, and its sampled peak."),
                    panel('GPU utilization by server, per GPU', 'percentunit', [
                      ['max by (instance, %(SERVER)s, gpu) (gym_server_gpu_utilization_ratio{%(SEL)s})' % s, '{{nemo_gym_server_name}} GPU {{gpu}} {{instance}}'],
                    ], description="Share of time a kernel of each server's processes ran on each GPU (NVML's per-process SM utilization)."),
                    panel('GPUs: used, unattributed, total', 'bytes', [
                      ['sum by (instance, gpu) (gym_gpu_memory_used_bytes{%(HOST)s})' % s, 'used GPU {{gpu}} {{instance}}'],
                      ['sum by (instance, gpu) (gym_gpu_memory_unattributed_bytes{%(HOST)s})' % s, "no server's GPU {{gpu}} {{instance}}"],
                      ['sum by (instance, gpu) (gym_gpu_memory_total_bytes{%(HOST)s})' % s, 'total GPU {{gpu}} {{instance}}'],
                    ], description="Memory in use on each GPU; of it, what no known server holds (other processes, the driver); and the GPU's memory."),
                    panel('Exits and OOM kills', 'short', [
                      ['sum by (instance, %s, reason) (%s)' % [SERVER, increase('gym_server_exits_total')], '{{nemo_gym_server_name}} {{reason}} {{instance}}'],
                      ['sum by (instance, %s) (%s)' % [SERVER, increase('gym_server_cgroup_oom_kills_total')], "OOM kills in {{nemo_gym_server_name}}'s cgroup {{instance}}"],
                      ['sum by (instance) (%(hostOoms)s)' % s, 'OOM kills on {{instance}}'],
                    ], description="Server root processes that exited (oom_kill: killed by the OOM killer), OOM kills in servers' own cgroups, and on the whole host."),
                    panel('Process deaths by reason', 'short', [
                      ['sum by (instance, %s, reason) (%s) > 0' % [SERVER, increase('gym_server_process_exits_total')], '{{nemo_gym_server_name}} {{reason}} {{instance}}'],
                    ], description="Every process of each server that died (children and sandboxes too, however short their lives), by reason: exit_zero, exit_nonzero, signal, oom_kill. From the kernel's process events (the exporter as root); /api/v1/deaths lists each with its exit code or signal."),
                    panel("Which server's event loop is blocked, and for how long", 's', [
                      ['max by (instance, nemo_gym_server_name) (gym_python_event_loop_blocked_seconds{%(SEL)s})' % s, perServerHost],
                    ], description="How long each Python server's event loop has not run its heartbeat, now (0: it runs): a synchronous call or a CPU-bound verifier run inline holds the loop, and nothing else in that server runs meanwhile."),
                    panel('Event loop lag (p99)', 's', [
                      ['histogram_quantile(0.99, sum by (le, instance, nemo_gym_server_name) (%s))' % rate('gym_python_event_loop_lag_seconds_bucket'), perServerHost],
                    ], description="How late each server's loop ran a callback that was due: a loop that is busy, not blocked, is late by milliseconds."),
                    panel('Event loop tasks and threads', 'short', [
                      ['sum by (instance, nemo_gym_server_name) (gym_python_event_loop_tasks{%(SEL)s})' % s, 'tasks ' + perServerHost],
                      ['sum by (instance, nemo_gym_server_name) (gym_python_threads{%(SEL)s})' % s, 'threads ' + perServerHost],
                    ], description="Tasks alive in each server's event loop, and its process's threads."),
                    panel('Time paused by garbage collection', 'percentunit', [
                      [
                        'sum by (instance, nemo_gym_server_name, nemo_gym_python_gc_generation) (%s)' % rate('gym_python_gc_pause_seconds_sum'),
                        '{{nemo_gym_server_name}} gen {{nemo_gym_python_gc_generation}} {{instance}}',
                      ],
                    ], description='Share of time each Python server was paused by its garbage collector, by generation.', stack=true),
                    panel('Sample time', 's', [
                      ['max by (instance, collector) (gym_exporter_collector_sample_duration_seconds{%(HOST)s})' % s, '{{collector}} {{instance}}'],
                    ], description="How long each collector's last sample took, against its interval."),
                  ],
                  [
                    g.labelVariable('server', 'Server', 'gym_server_up', 'nemo_gym_server_name', BASE),
                  ]),
  },
}
