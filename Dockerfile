# syntax=docker/dockerfile:1
#
# The bulkd image for people who build with Docker (BuildKit). `make image`
# builds the same image without a daemon (hack/image): a scratch image with
# a nonroot user, /tmp, CA certificates, nsswitch.conf and the static binary
# at /usr/local/bin/bulkd. Both take the base files from hack/image, so they
# do not drift apart.
#
#   docker build -t localhost/bulkd:0.1.0 --build-arg VERSION=$(git describe --tags --always) \
#       --build-arg COMMIT=$(git rev-parse --short HEAD) .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/usr/local/bin/bulkd ./cmd/bulkd
# Base files (passwd/group with nonroot 65532, nsswitch.conf, /tmp 1777,
# /home/nonroot, the build image's CA bundle): the same as make image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go run ./hack/image rootfs /out

FROM scratch
COPY --from=build /out/ /
USER 65532:65532
WORKDIR /
ENV PATH=/usr/local/bin:/usr/bin:/bin
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="bulkd" \
      org.opencontainers.image.description="bulkd: bulk company enrichment, email lookup and email verification" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/bulkd/bulkd"
ENTRYPOINT ["/usr/local/bin/bulkd"]
