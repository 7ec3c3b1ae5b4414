# syntax=docker/dockerfile:1
# One image per controller binary, from one Dockerfile:
#   docker build --build-arg CONTROLLER=node-controller    -t valkey-operator/node-controller:0.1.0 .
#   docker build --build-arg CONTROLLER=cluster-controller -t valkey-operator/cluster-controller:0.1.0 .
# (`make images` runs both.)
#
# Static linking: the gnu target with crt-static, on the same Debian bookworm toolchain the project
# develops on. Checked there with this RUN's cargo command: `file` says "static-pie linked", and
# the binary (node-controller 23.6 MB, cluster-controller 19.2 MB) runs as uid 65532 in an empty
# chroot and against a cluster. The
# controllers resolve no host names (the API server comes from KUBERNETES_SERVICE_HOST, Valkey
# from pod IPs), so glibc's static getaddrinfo caveat does not apply. A musl build would need
# `rustup target add`, which this project's machines cannot reach, so it could not be checked.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
ARG CONTROLLER
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    test -n "${CONTROLLER}" || { echo "--build-arg CONTROLLER=node-controller|cluster-controller is required" >&2; exit 1; } \
    && triple="$(uname -m)-unknown-linux-gnu" \
    && extra="" && if [ "${CONTROLLER}" = node-controller ]; then extra="backup"; fi \
    && RUSTFLAGS="-C target-feature=+crt-static" \
       cargo build --release --locked --target "${triple}" -p "${CONTROLLER}" ${extra:+-p "${extra}"} \
    && install -D -m 0755 "target/${triple}/release/${CONTROLLER}" /out/controller \
    && if [ -n "${extra}" ]; then install -D -m 0755 "target/${triple}/release/valkey-restore" /out/valkey-restore; fi

# No shell, no package manager, no libc: the static binary, CA certificates and a non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
# The node-controller's image also holds valkey-restore, the init container of a restored member.
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/controller"]
