"""The rule base where SREs already look: Prometheus recording and alerting rules written from
rules/*.yaml, the SLO file and the metric dialects (advisor.alerting.prometheus_rules)."""
