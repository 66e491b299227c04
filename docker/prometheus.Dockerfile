# Prometheus from Debian's package (the prometheus role of packaging/dependencies). Context: the
# repository root (.dockerignore sends the dependency list and docker/prometheus.yml). The
# compose file mounts the scrape config (docker/prometheus.yml) and the rules (monitoring/), so
# editing them needs no rebuild.
ARG BASE_IMAGE=debian:12-slim

# The packages to install, in a file that changes only when they do (see zookeeper.Dockerfile).
FROM ${BASE_IMAGE} AS packages
COPY packaging/dependencies packaging/list-dependencies /deps/
RUN /deps/list-dependencies prometheus >/packages

FROM ${BASE_IMAGE}
COPY --from=packages /packages /tmp/packages
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      $(cat /tmp/packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/packages \
 && install -d -o prometheus -g prometheus /prometheus
COPY docker/prometheus.yml /etc/prometheus/prometheus.yml
VOLUME /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["prometheus", "--config.file=/etc/prometheus/prometheus.yml", \
            "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
