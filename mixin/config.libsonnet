// What a user of the mixin sets. Import the mixin and override any of these:
//
//   (import 'gym-exporter-mixin/mixin.libsonnet') + {
//     _config+:: { gymSelector: 'job="nemo-gym"', ruleRateInterval: '2m' },
//   }
//
// The defaults produce config/rules/*.yml and dashboards/*.json as shipped.
{
  _config+:: {
    // Matches the exporters' scrape jobs; put in every selector of every rule
    // and in the dashboards' job variable. config/prometheus.yml names its
    // jobs gym and gym-discovered.
    // Not empty: it is written inside {...} before other matchers.
    gymSelector: 'job=~"gym.*"',

    // The window of the recording rules' rates (a number and s, m or h); it is part of their names
    // (gym:...:rate5m), so the alerts and dashboards follow it.
    ruleRateInterval: '5m',
    // Every rate and increase in the dashboards.
    dashboardRateInterval: '$__rate_interval',

    // Where each alert's runbook is: %s is the alert's name in lower case,
    // the anchor of its section in docs/runbook.md. An absolute URL (your
    // copy of the repository, or the .deb's /usr/share/doc/gym-exporter) is
    // what Alertmanager's receivers can open.
    runbookURLPattern: 'docs/runbook.md#%s',

    // Alert thresholds.
    queueGrowingSeconds: 600,  // a full limit whose queue grew this long
    holdStuckSeconds: 900,  // a slot held this long while nothing is admitted
    strandedSlotsSeconds: 600,  // free slots beside another process's queue this long
    waitGrowingSeconds: 300,  // the oldest wait, growing
    operationSlowSeconds: 300,  // p99 run time of an operation
    operationErrorRatio: 0.05,  // share of a server's operations that fail
    operationTimeoutRatio: 0.05,  // share that time out
    operationMinRate: 0.1,  // operations per second before a ratio alerts
    serverHostMemoryShare: 0.8,  // a server's RSS over the host's memory
    memoryGrowthHorizonSeconds: 3600,  // memory growth that fills the host this soon
    cgroupMemoryLimitShare: 0.9,  // a server's cgroup near its limit
    cpuThrottledRatio: 0.25,  // share of CFS periods a server's cgroups are throttled
    oldestProcessSeconds: 10800,  // a server's process other than its roots this old has leaked
    memoryPressureFullRatio: 0.1,  // all tasks of a cgroup stalled on memory
    gpuMemoryFullRatio: 0.97,  // a GPU nearly full (vLLM reserves 0.9)
    eventLoopBlockedSeconds: 60,  // a Python server's loop not running
    processDeathWindowSeconds: 600,  // the window over which a server's processes' deaths are counted
    processCrashes: 5,  // processes of a server killed by a signal (not the OOM killer) in that window

    // The verdict's recording rules (docs/verdict.md): their window, and the
    // thresholds of the exporter's verdict: section, with its defaults.
    verdictWindow: '2m',
    verdictSaturation: 0.9,
    verdictMinWaiting: 0.5,
    verdictStrandedSlots: 0.5,
    verdictQueueOverRun: 1,
    verdictThrottledShare: 0.25,
    verdictLoopBlockedSeconds: 1,
    verdictLoopLagP99Seconds: 0.1,
    verdictGpuMemoryRatio: 0.95,

    // Dashboards.
    dashboardTags: ['gym', 'nemo-gym'],
    dashboardRefresh: '30s',
    dashboardFrom: 'now-1h',
  },
}
