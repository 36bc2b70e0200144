// Recording rules the alerts and dashboards build on. Every rule keeps the
// job and instance labels, so a host is always told apart.
local limit = 'job, instance, nemo_gym_concurrency_component, nemo_gym_concurrency_limit_name, nemo_gym_server_name';
{
  // The name of a recording rule over the configured rate window.
  rateRecord(name):: 'gym:%s:rate%s' % [name, $._config.ruleRateInterval],

  prometheusRules+:: {
    local c = $._config { limit: limit },
    groups+: [{
      name: 'gym-recording',
      rules: [
        // Fraction of a concurrency limit's slots held (1 = full).
        {
          record: 'gym:concurrency_saturation:ratio',
          expr: |||
            sum by (%(limit)s) (gym_concurrency_active{%(gymSelector)s})
            /
            sum by (%(limit)s) (gym_concurrency_limit{%(gymSelector)s})
          ||| % c,
        },
        // Resources operations finished per second, by outcome.
        {
          record: $.rateRecord('resources_operation_outcomes'),
          expr: |||
            sum by (job, instance, nemo_gym_resources_operation, nemo_gym_resources_executor, nemo_gym_server_name, nemo_gym_resources_operation_outcome) (
              rate(gym_resources_operation_duration_seconds_count{%(gymSelector)s}[%(ruleRateInterval)s])
            )
          ||| % c,
        },
        // Per server (all its operations and executors): operations finished
        // per second, and the shares that failed (error or crashed) and timed
        // out. Alerts use these: one alert per server, not per operation.
        {
          record: $.rateRecord('resources_operations_by_server'),
          expr: |||
            sum by (job, instance, nemo_gym_server_name) (%s)
          ||| % $.rateRecord('resources_operation_outcomes'),
        },
        {
          record: $.rateRecord('resources_operation_error_ratio_by_server'),
          expr: |||
            sum by (job, instance, nemo_gym_server_name) (%s{nemo_gym_resources_operation_outcome=~"error|crashed"})
            /
            %s
          ||| % [$.rateRecord('resources_operation_outcomes'), $.rateRecord('resources_operations_by_server')],
        },
        {
          record: $.rateRecord('resources_operation_timeout_ratio_by_server'),
          expr: |||
            sum by (job, instance, nemo_gym_server_name) (%s{nemo_gym_resources_operation_outcome="timeout"})
            /
            %s
          ||| % [$.rateRecord('resources_operation_outcomes'), $.rateRecord('resources_operations_by_server')],
        },
        // 99th percentile of the time operations ran, per server and
        // operation (executors together).
        {
          record: 'gym:resources_operation_duration_seconds:p99_%s' % $._config.ruleRateInterval,
          expr: |||
            histogram_quantile(0.99, sum by (le, job, instance, nemo_gym_resources_operation, nemo_gym_server_name) (
              rate(gym_resources_operation_duration_seconds_bucket{%(gymSelector)s}[%(ruleRateInterval)s])
            ))
          ||| % c,
        },
        // A server's share of its host's memory, by RSS (swap is not in RAM;
        // PSS and USS are at most RSS).
        {
          record: 'gym:server_memory_host_share:ratio',
          expr: |||
            max by (job, instance, nemo_gym_server_name, nemo_gym_server_type) (gym_server_memory_usage_bytes{%(gymSelector)s, memory_type="rss"})
            / on (job, instance) group_left
            gym_host_memory_total_bytes{%(gymSelector)s}
          ||| % c,
        },
      ],
    }],
  },
}
