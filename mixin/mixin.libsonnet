// gym-exporter's monitoring mixin: Prometheus recording rules and alerts and
// Grafana dashboards from one source, set by _config (config.libsonnet).
// Import it, override _config, and render prometheusRules, prometheusAlerts
// and grafanaDashboards as any mixin's; build.jsonnet renders the files this
// repository ships.
(import 'config.libsonnet') +
{ assert self._config.gymSelector != '' : '_config.gymSelector must be a matcher, such as job="gym"' } +
(import 'rules.libsonnet') +
(import 'verdict.libsonnet') +
(import 'alerts.libsonnet') +
(import 'dashboards.libsonnet')
