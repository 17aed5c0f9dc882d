#!/usr/bin/env bash
# scripts/dockerd.sh up|down|status: a Docker engine of the tests' own, beside
# the local Kubernetes cluster's containerd, touching nothing of it:
#
#   socket     /run/knotless-dockerd/docker.sock   (export DOCKER_HOST=unix://... to use it)
#   data root  /var/lib/knotless-dockerd           (images, containers, volumes)
#   exec root  /run/knotless-dockerd/exec          (its own managed containerd under it)
#
# No default bridge (--bridge none): the Docker executor makes its own
# networks, from 172.30.0.0/16 (clear of the cluster's 10.244.0.0/16 pods and
# 10.96.0.0/16 services). dockerd adds its iptables chains (DOCKER,
# DOCKER-USER, DOCKER-ISOLATION-*) for its own bridges only and leaves
# ip_forward and the FORWARD policy alone (--ip-forward=false); like the
# cluster's pods, containers may not leave the machine: a DOCKER-USER rule
# drops their traffic out of eth0. `up` is a no-op when the engine answers;
# `down` stops only the dockerd this script started (its pidfile), its
# containers and its containerd with it, and removes the DOCKER-USER rule.
#
# Environment: KNOTLESS_DOCKERD_ROOT (default /run/knotless-dockerd),
# KNOTLESS_DOCKERD_DATA (default /var/lib/knotless-dockerd).
set -euo pipefail

run=${KNOTLESS_DOCKERD_ROOT:-/run/knotless-dockerd}
data=${KNOTLESS_DOCKERD_DATA:-/var/lib/knotless-dockerd}
sock=$run/docker.sock
pidfile=$run/dockerd.pid
log=$run/dockerd.log
pool=172.30.0.0/16
egress=$(ip -o route show default 2>/dev/null | awk '{print $5; exit}')
egress=${egress:-eth0}

answers() { DOCKER_HOST=unix://$sock timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

up() {
	if answers; then
		echo "dockerd: already answering on unix://$sock"
		return 0
	fi
	command -v dockerd >/dev/null || { echo "dockerd: not installed (apt-get install docker.io)" >&2; exit 1; }
	mkdir -p "$run" "$data"
	# --oom-score-adjust 0: root here lacks CAP_SYS_RESOURCE (docs/development.md).
	setsid dockerd \
		--host "unix://$sock" --pidfile "$pidfile" \
		--data-root "$data" --exec-root "$run/exec" \
		--bridge none --ip-forward=false --iptables=true --ip-masq=true \
		--default-address-pool "base=$pool,size=24" \
		--oom-score-adjust 0 --storage-driver overlay2 \
		--log-level warn </dev/null >"$log" 2>&1 &
	local pid=$! i
	for i in $(seq 1 300); do
		if answers; then break; fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "dockerd: exited at start; its log:" >&2
			tail -n 30 "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
	answers || { echo "dockerd: no answer on unix://$sock after 30 s; its log:" >&2; tail -n 30 "$log" >&2; exit 1; }
	iptables -w -C DOCKER-USER -s "$pool" -o "$egress" -j DROP 2>/dev/null ||
		iptables -w -I DOCKER-USER -s "$pool" -o "$egress" -j DROP
	echo "dockerd: up (pid $pid) on unix://$sock, data root $data"
}

down() {
	local pid=""
	[ -f "$pidfile" ] && pid=$(cat "$pidfile")
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		local i
		for i in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "dockerd: pid $pid still running after 15 s: SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		echo "dockerd: stopped (pid $pid)"
	else
		echo "dockerd: not running (no live pid in $pidfile)"
	fi
	iptables -w -D DOCKER-USER -s "$pool" -o "$egress" -j DROP 2>/dev/null || true
	rm -f "$pidfile"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) if answers; then echo "dockerd: up on unix://$sock"; else echo "dockerd: down"; exit 1; fi ;;
*) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
