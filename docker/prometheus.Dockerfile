# Prometheus from Debian's package, with the scrape config of the compose cluster and the alert
# rules of monitoring/. Context: the repository root.
ARG BASE_IMAGE=debian:12-slim
FROM ${BASE_IMAGE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      prometheus \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o prometheus -g prometheus /prometheus
COPY docker/prometheus.yml /etc/prometheus/prometheus.yml
COPY monitoring/zkagent-rules.yml /etc/prometheus/rules/zkagent-rules.yml
RUN promtool check config /etc/prometheus/prometheus.yml
VOLUME /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["prometheus", "--config.file=/etc/prometheus/prometheus.yml", \
            "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
