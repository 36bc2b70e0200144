// The files this repository ships, rendered from the mixin with its default
// _config: a path for each, and what goes in it. mixin/build.sh writes them
// (jsonnet's own YAML and JSON writers take seconds a file; Python's don't).
local mixin = import 'mixin.libsonnet';

{
  ['dashboards/' + name]: mixin.grafanaDashboards[name]
  for name in std.objectFields(mixin.grafanaDashboards)
} + {
  'config/rules/gym-recording.yml': mixin.prometheusRules,
  'config/rules/gym-alerts.yml': mixin.prometheusAlerts,
  // The Prometheus Operator's PrometheusRule for the DaemonSet of
  // deploy/kubernetes/node/: the same groups.
  'deploy/kubernetes/node/prometheusrule.yaml': {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: 'gym-exporter',
      namespace: 'gym-monitoring',
      labels: { 'app.kubernetes.io/name': 'gym-exporter' },
    },
    spec: { groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups },
  },
}
