#!/usr/bin/env bash
# A thunder client in another language (Go's grpcurl), with no copy of thunder.proto:
# everything is discovered through server reflection. docs/serving.md shows these
# commands; tests/thunder/test_outside_client.py runs this script against a live server.
#
#   scripts/thunder_client_example.sh 127.0.0.1:50061
#
# grpcurl is built once through the Go module proxy and cached outside git.
set -euo pipefail
ADDR="${1:?usage: $0 HOST:PORT}"
GREBE_BIN="${GREBE_BIN:-$HOME/.cache/grebe/bin}"
GRPCURL="$GREBE_BIN/grpcurl"
if [[ ! -x "$GRPCURL" ]]; then
  GOBIN="$GREBE_BIN" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.1 >&2
fi

echo "== services"
"$GRPCURL" -plaintext "$ADDR" list
echo "== health"
"$GRPCURL" -plaintext -d '{"service": "grebe.thunder.v1.InNetworkPosts"}' \
  "$ADDR" grpc.health.v1.Health/Check
echo "== posts"
"$GRPCURL" -plaintext -d '{"user_id": "viewer", "following_user_ids": ["alice", "bob"],
  "max_results": 10, "debug": true}' \
  "$ADDR" grebe.thunder.v1.InNetworkPosts/GetInNetworkPosts
