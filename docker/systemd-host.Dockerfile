# An operator's Debian 12 host for docker/systemd-test: systemd as PID 1 and the D-Bus system bus
# a Debian host with systemd has (the systemd-host role of packaging/dependencies), nothing of
# zkagent. The test installs the three .debs into a running container with `apt-get install
# ./*.deb`, as docs/deployment.md tells operators to, so their Depends are resolved from the
# mirror there, not here. Context: the repository root (.dockerignore sends the dependency list).
ARG BASE_IMAGE=debian:12-slim

# The packages to install, in a file that changes only when they do (see zookeeper.Dockerfile).
FROM ${BASE_IMAGE} AS packages
COPY packaging/dependencies packaging/list-dependencies /deps/
RUN /deps/list-dependencies systemd-host >/packages

FROM ${BASE_IMAGE}
COPY --from=packages /packages /tmp/packages
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      $(cat /tmp/packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/packages \
# Units that have nothing to do in a container (no consoles, no kernel to tune, no clock to set).
 && systemctl mask getty.target console-getty.service systemd-udevd.service \
      systemd-modules-load.service systemd-sysctl.service systemd-timesyncd.service \
      systemd-remount-fs.service sys-kernel-config.mount sys-kernel-debug.mount \
      sys-kernel-tracing.mount
# systemd reads the kind of container from this; it then skips what a container cannot do.
ENV container=docker
# What systemd takes as "shut down cleanly" (docker stop sends it).
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
