# A local stand-in for the official golang:<minor>-bookworm image, for machines that reach no
# container registry (scripts/ensure-docker.sh builds it only when pulling the tag fails).
# Context: a directory holding `go/`, the Go toolchain module (golang.org/toolchain) for the
# pinned release, which the go command downloads from the Go module proxy.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
COPY go /usr/local/go
ENV GOPATH=/go \
    GOTOOLCHAIN=local \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/bin /go/src && go version
WORKDIR /go
