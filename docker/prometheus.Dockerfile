# Prometheus from Debian's package. Context: docker/. The compose file mounts the scrape config
# (docker/prometheus.yml) and the rules (monitoring/), so editing them needs no rebuild.
ARG BASE_IMAGE=debian:12-slim
FROM ${BASE_IMAGE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      prometheus \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o prometheus -g prometheus /prometheus
COPY prometheus.yml /etc/prometheus/prometheus.yml
VOLUME /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["prometheus", "--config.file=/etc/prometheus/prometheus.yml", \
            "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
