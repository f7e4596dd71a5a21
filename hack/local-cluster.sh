#!/usr/bin/env bash
# Entry point of hack/local-cluster/: up | down | status | kubeconfig | exec CMD… | e2e
# (see hack/local-cluster/cluster.sh and docs/e2e.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  e2e) shift; exec "${HERE}/local-cluster/e2e.sh" "$@" ;;
  *) exec "${HERE}/local-cluster/cluster.sh" "$@" ;;
esac
