# plb-live-fleet.sh: bench/plb-live.sh --proxies N (issue 27 item 3). Sourced by plb-live.sh
# once its primary, its cgroup-capped replicas and its queries file are up; it uses that
# script's helpers (run_load, faults, r, user_classes, cg_*) and variables, and never runs
# alone.
#
# N pgtier processes, each on its own port, in front of the same replicas; pgtier-load spreads
# the sessions over them round robin in arrival order (--port P1,P2,..., as a TCP load
# balancer would), from the same seed in every run (common random numbers). Runs, at RATE:
#   single       one pgtier holding every client, PLB with θ = THETA (the reference)
#   independent  N pgtiers, each PLB on its own clients, θ = THETA
#   split        N pgtiers, θ = THETA / N rounded (at least 1), α raised to 1/θ where
#                ⌊α·θ⌋ would be 0 (the configuration refuses a zero return watermark)
#   fleet        N pgtiers with fleet_name set, the store on the primary
#                (fleet_report_interval = FLEET_INTERVAL); needs a pgtier with the fleet
#                (SHOW FLEET): without it the fleet runs are skipped and the report says so
# During every fleet run a sampler reads SHOW FLEET and SHOW REPLICAS on every proxy each
# FLEET_SAMPLE seconds: the share of rounds in which all live proxies hold the same role-table
# version (the issue's agreement), and the share in which they route with the same roles.
# Fleet scenarios (FLEET_SCENARIOS), FLEET_SCENARIO_DURATION seconds each, at RATE:
#   leader-kill    SIGKILL of the process SHOW FLEET names leader at 1/3 of the run, restarted
#                  at 2/3: time to a new leader (and in intervals), errors seen by the clients
#                  of the surviving proxies and of the killed one, the versions seen (they
#                  must only increase)
#   store-outage   the store's PostgreSQL (the primary) stopped at 1/3, started at 2/3: every
#                  proxy must report local mode and keep serving, then rejoin
# Output: fleet.md (a Markdown fragment, also printed), <run>.csv, <run>-proxies.csv (which
# proxy each session used), <run>-fleet.csv (the samples), <run>-actions.csv, pgtier-K.log.
# Environment: FLEET_MODES="single independent split fleet" FLEET_SCENARIOS="leader-kill
#   store-outage" FLEET_INTERVAL=1 FLEET_SAMPLE=$FLEET_INTERVAL
#   FLEET_SCENARIO_DURATION=90 (--quick: 30) FLEET_FORM_TIMEOUT=30

FLEET_MODES="${FLEET_MODES-single independent split fleet}"
FLEET_SCENARIOS="${FLEET_SCENARIOS-leader-kill store-outage}"
FLEET_INTERVAL="${FLEET_INTERVAL:-1}"
FLEET_SAMPLE="${FLEET_SAMPLE:-$FLEET_INTERVAL}"
FLEET_SCENARIO_DURATION="${FLEET_SCENARIO_DURATION:-$([ "$QUICK" = 1 ] && echo 30 || echo 90)}"
FLEET_FORM_TIMEOUT="${FLEET_FORM_TIMEOUT:-30}"
FLEET_NAME=plb-live
[ "$PROXIES" -ge 1 ] || { log "--proxies needs at least 1"; exit 2; }

declare -a fport
for k in $(seq 0 $((PROXIES - 1))); do fport[k]="$(free_port)"; done
pgtier_port="${fport[0]}"   # plb-live.sh's admin() and run_load read proxy 0
LOAD_PORTS=""
echo "label,at_s,action,replica" >"$OUT/faults.csv"
echo "label,replica,cpu_s,u" >"$OUT/replica_cpu.csv"

# theta_alpha MODE: "θ α_P α_F" of a mode's proxies.
theta_alpha() {
  if [ "$1" = split ]; then
    awk -v t="$THETA" -v n="$PROXIES" 'BEGIN { s = int(t / n + 0.5); if (s < 1) s = 1;
      ap = (int(0.6 * s + 1e-9) < 1) ? 1 / s : 0.6; af = (int(0.8 * s + 1e-9) < 1) ? 1 / s : 0.8;
      printf "%d %s %s\n", s, ap, af }'
  else
    echo "$THETA 0.6 0.8"
  fi
}

# proxy_config K MODE: proxy K's configuration file.
proxy_config() {
  local k="$1" mode="$2" theta ap af fleet_keys=""
  read -r theta ap af <<<"$(theta_alpha "$mode")"
  if [ "$mode" = fleet ]; then
    fleet_keys="fleet_name = \"$FLEET_NAME\"
fleet_store = \"host=127.0.0.1 port=$pg_port dbname=postgres user=postgres\"
fleet_report_interval = $FLEET_INTERVAL"
  fi
  cat >"$work/pgtier-$k.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = ${fport[k]}
workers = 1
auth_type = "trust"
auth_file = "$work/userlist.txt"
admin_users = ["postgres"]
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 1000
query_wait_timeout = 120
log_level = "warn"
$fleet_keys

$(user_classes PLB)

[databases.live]
dbname = "postgres"
user = "postgres"
replicas = [$all]
routing = "plb"
[databases.live.plb]
premium = [$(r 0 1)]
freemium = [$(r 2 3)]
theta_premium = $theta
theta_freemium = $theta
alpha_premium = $ap
alpha_freemium = $af
CONF
}

# Each proxy's pid lives in $work/proxy-K.pid (the scenario's restart happens in a
# background shell), and plb-live.sh's cleanup kills what these files name.
start_proxy() {
  local k="$1"
  PGTIER_LOG="${PGTIER_LOG:-warn}" "$PGTIER_BIN" --config "$work/pgtier-$k.toml" >>"$work/pgtier-$k.log" 2>&1 &
  echo $! >"$work/proxy-$k.pid"
  wait_port "${fport[k]}" "pgtier $k" "$!" || { cat "$work/pgtier-$k.log" >&2; return 1; }
}
stop_proxies() {
  local f pid
  for f in "$work"/proxy-*.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"; rm -f "$f"
    kill -INT "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
# start_mode MODE: the proxies of MODE (one for single), each from its own config.
start_mode() {
  local count="$PROXIES" k ports=""
  [ "$1" = single ] && count=1
  stop_proxies
  for k in $(seq 0 $((count - 1))); do
    proxy_config "$k" "$1"
    start_proxy "$k" || exit 1
    ports+="${ports:+,}${fport[k]}"
  done
  LOAD_PORTS="$ports"
}

# fadmin K SQL...: the console of proxy K, tuples only, comma-separated; each SQL its own -c.
fadmin() {
  local k="$1" args=() sql; shift
  for sql in "$@"; do args+=(-c "$sql"); done
  "$bindir/psql" -X -q -t -A -F ',' -h 127.0.0.1 -p "${fport[k]}" -U postgres "${args[@]}" pgtier
}
proxy_alive() { [ -f "$work/proxy-$1.pid" ] && kill -0 "$(cat "$work/proxy-$1.pid")" 2>/dev/null; }
# The proxy whose SHOW FLEET member id (host:port) names this port.
proxy_of_member() {
  local k
  for k in $(seq 0 $((PROXIES - 1))); do
    [ "${1##*:}" = "${fport[k]}" ] && { echo "$k"; return; }
  done
  echo "?"
}
# fleet_leader: the member id the first answering proxy names leader ("" if none).
fleet_leader() {
  local k
  for k in $(seq 0 $((PROXIES - 1))); do
    proxy_alive "$k" || continue
    fadmin "$k" "SHOW FLEET" 2>/dev/null | awk -F, '$4 == "t" { print $2; exit }' && return
  done
}

# fleet_sampler LABEL: every FLEET_SAMPLE s, per proxy: round, epoch, proxy, its mode, the
# version it applied, whether it leads, the leader it names, and its role per replica
# (SHOW FLEET's self row has 11 fields, SHOW REPLICAS rows 17).
fleet_sampler() {
  local label="$1" round=0 k ts out
  echo "round,epoch,proxy,mode,version,is_leader,leader,roles" >"$OUT/$label-fleet.csv"
  while :; do
    round=$((round + 1)); ts="$(date +%s.%N)"
    for k in $(seq 0 $((PROXIES - 1))); do
      if proxy_alive "$k" && out="$(fadmin "$k" "SHOW FLEET" "SHOW REPLICAS" 2>/dev/null)"; then
        awk -F, -v r="$round" -v t="$ts" -v k="$k" '
          NF == 11 && $3 == "t" { mode = $8; version = $9; leading = $4 }
          NF == 11 && $4 == "t" { leader = $2 }
          NF >= 17 && $1 == "live" { roles = roles (roles == "" ? "" : "|") $3 }
          END { printf "%s,%s,%s,%s,%s,%s,%s,%s\n", r, t, k, (mode == "" ? "none" : mode), version, leading, leader, roles }' <<<"$out"
      else
        echo "$round,$ts,$k,down,,,,"
      fi
    done >>"$OUT/$label-fleet.csv"
    sleep "$FLEET_SAMPLE"
  done
}

# fleet_action LABEL WHAT ARG: the scenario steps faults() hands over (plb-live.sh).
fleet_action() {
  local label="$1" what="$2" k member
  case "$what" in
    killleader)
      member="$(fleet_leader)"; k="$(proxy_of_member "$member")"
      if [ "$k" = "?" ] || ! proxy_alive "$k"; then
        log "$label: no leader to kill (SHOW FLEET names '${member}')"
        echo "$(date +%s.%N),killleader,none,$member" >>"$OUT/$label-actions.csv"; return
      fi
      kill -9 "$(cat "$work/proxy-$k.pid")"; rm -f "$work/proxy-$k.pid"
      echo "$k" >"$work/killed"
      echo "$(date +%s.%N),killleader,$k,$member" >>"$OUT/$label-actions.csv"
      log "$label: SIGKILL of proxy $k ($member), the leader" ;;
    startproxy)
      [ -f "$work/killed" ] || return 0
      k="$(cat "$work/killed")"; rm -f "$work/killed"
      start_proxy "$k" || log "$label: restarting proxy $k failed"
      echo "$(date +%s.%N),startproxy,$k," >>"$OUT/$label-actions.csv" ;;
    stopstore)
      as_pg "$bindir/pg_ctl" -D "$work/primary/data" -m fast -w stop >/dev/null 2>&1 || true
      echo "$(date +%s.%N),stopstore,," >>"$OUT/$label-actions.csv"; log "$label: store stopped" ;;
    startstore)
      as_pg "$bindir/pg_ctl" -D "$work/primary/data" -l "$work/primary/postgres.log" -w start >/dev/null
      echo "$(date +%s.%N),startstore,," >>"$OUT/$label-actions.csv"; log "$label: store started" ;;
    *) log "unknown action $what"; return 1 ;;
  esac
}

# fleet_formed: every proxy in fleet mode and one leader named, within FLEET_FORM_TIMEOUT.
fleet_formed() {
  local k ok
  for _ in $(seq 1 $((FLEET_FORM_TIMEOUT * 2))); do
    ok=1
    for k in $(seq 0 $((PROXIES - 1))); do
      fadmin "$k" "SHOW FLEET" 2>/dev/null | awk -F, '$3 == "t" && $8 == "fleet" { f = 1 } END { exit !f }' || ok=0
    done
    [ "$ok" = 1 ] && [ -n "$(fleet_leader)" ] && return 0
    sleep 0.5
  done
  return 1
}

# run_mode LABEL MODE SECONDS [PLAN...]: one seeded load through MODE's proxies, sampled when
# it is the fleet.
run_mode() {
  local label="$1" mode="$2" seconds="$3" sampler=""
  shift 3
  : >"$OUT/$label-actions.csv"
  if [ "$mode" = fleet ]; then
    fleet_sampler "$label" & sampler=$!
  fi
  date +%s.%N >"$OUT/$label-start"
  PROXY_MAP="$OUT/$label-proxies.csv" run_load "$label" "$RATE" "$seconds" "$@"
  [ -n "$sampler" ] && { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; }
  for f in "$work"/pgtier-*.log; do cp "$f" "$OUT/$label-$(basename "$f")" 2>/dev/null || true; done
  return 0
}

# ---- is there a fleet to measure? ----
fleet_note=""
start_mode single
if ! fleet_probe="$(fadmin 0 "SHOW FLEET" 2>&1)"; then
  fleet_note="this pgtier has no fleet (SHOW FLEET: $(echo "$fleet_probe" | head -1)); the fleet runs and scenarios were skipped, nothing was measured for them"
  log "$fleet_note"
fi

ran=()
for mode in $FLEET_MODES; do
  if [ "$mode" = fleet ] && [ -n "$fleet_note" ]; then continue; fi
  start_mode "$mode"
  if [ "$mode" = fleet ] && ! fleet_formed; then
    fleet_note="the fleet did not form within ${FLEET_FORM_TIMEOUT}s (SHOW FLEET on proxy 0: $(fadmin 0 "SHOW FLEET" 2>&1 | head -3 | tr '\n' ' ')); nothing was measured for it"
    log "$fleet_note"; continue
  fi
  run_mode "$mode" "$mode" "$DURATION"
  ran+=("$mode")
done

fail_at() { awk -v d="$FLEET_SCENARIO_DURATION" -v k="$1" 'BEGIN { printf "%.1f", d * k / 3 }'; }
scenarios_run=()
if [ -z "$fleet_note" ]; then
  for s in $FLEET_SCENARIOS; do
    case "$s" in
      leader-kill) plan=("$(fail_at 1):killleader:0" "$(fail_at 2):startproxy:0") ;;
      store-outage) plan=("$(fail_at 1):stopstore:0" "$(fail_at 2):startstore:0") ;;
      *) log "unknown fleet scenario $s"; exit 1 ;;
    esac
    start_mode fleet
    fleet_formed || { log "$s: the fleet did not form"; continue; }
    run_mode "$s" fleet "$FLEET_SCENARIO_DURATION" "${plan[@]}"
    scenarios_run+=("$s")
  done
fi
stop_proxies

# ---- report ------------------------------------------------------------------------------
from="$(awk -v d="$DURATION" 'BEGIN { printf "%.1f", d * 0.2 }')"
ins=(); for m in "${ran[@]}"; do ins+=(--in "$m=$OUT/$m.csv"); done
base=""; for m in "${ran[@]}"; do [ "$m" = single ] && base=single; done
if [ ${#ins[@]} -gt 0 ]; then
  "$PGTIER_LOAD_BIN" summarize "${ins[@]}" --phases "steady:$from:$DURATION" ${base:+--baseline "$base"} \
    --md "$OUT/fleet-contention.md" --csv "$OUT/fleet-contention.csv" --png "$OUT/fleet-contention.png" >/dev/null
fi

# p95_ratio A B CLASS: A's p95 over B's in the contention CSV ("n/a" if either is missing).
p95_ratio() {
  awk -F, -v a="$1" -v b="$2" -v c="$3" '$2 == "steady" && $3 == c { p[$1] = $8 }
    END { if (p[a] > 0 && p[b] > 0) printf "%.2f", p[a] / p[b]; else printf "n/a" }' "$OUT/fleet-contention.csv"
}

# agreement LABEL: "version% table% rounds" over the sample rounds in which every live proxy
# answered in fleet mode (a round with a proxy down counts its live ones).
agreement() {
  awk -F, 'NR > 1 && $4 != "down" { n[$1]++; v[$1, n[$1]] = $5; t[$1, n[$1]] = $8; m[$1] = m[$1] ($4 == "fleet" ? "" : "x") }
    END { for (r in n) { rounds++; sv = 1; st = 1
            for (i = 2; i <= n[r]; i++) { if (v[r, i] != v[r, 1]) sv = 0; if (t[r, i] != t[r, 1]) st = 0 }
            if (m[r] != "") sv = 0
            av += sv; at += st }
          if (rounds) printf "%.1f %.1f %d", 100 * av / rounds, 100 * at / rounds, rounds; else print "n/a n/a 0" }' "$OUT/$1-fleet.csv"
}
# versions LABEL: "min max decreases" of the versions the proxies applied in fleet mode (a
# decrease on one proxy between two of its samples would be a fork or a rollback; local mode
# shows no applied version).
versions() {
  awk -F, 'NR > 1 && $4 == "fleet" && $5 != "" { if (min == "" || $5 < min) min = $5; if ($5 > max) max = $5
      if (($3 in last) && $5 < last[$3]) dec++; last[$3] = $5 }
    END { printf "%s %s %d", (min == "" ? "-" : min), (max == "" ? "-" : max), dec }' "$OUT/$1-fleet.csv"
}
# client_errors LABEL [PROXY]: failed queries and failed connect attempts (a session retries
# every 200 ms) of the sessions on PROXY, and how many sessions saw any ("" = all, "!K" =
# every proxy but K).
client_errors() {
  awk -F, -v want="${2:-}" 'FNR == 1 { file++; next }
    file == 1 { proxy[$1 "," $2] = $3; next }
    $6 ~ /^error/ { p = proxy[$1 "," $2]
      if (want == "" || (substr(want, 1, 1) == "!" ? p != substr(want, 2) : p == want)) {
        if ($3 == "<connect>") c++; else q++
        if (!(($1 "," $2) in hit)) { hit[$1 "," $2] = 1; s++ } } }
    END { printf "%d queries, %d connects (%d sessions)", q, c, s }' "$OUT/$1-proxies.csv" "$OUT/$1.csv"
}

{
  echo "## Several proxies: $PROXIES pgtier processes in front of the same $REPLICAS replicas"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $REPLICAS replicas at $REPLICA_CPU cores each (cgroup $cg_mode), $data, seed $SEED;"
  echo "$RATE sessions/s, premium share $PREMIUM_SHARE, lifetime $LIFETIME s, think $THINK s, θ = $THETA"
  echo "(split: θ = $(theta_alpha split | awk '{ printf "%s, α_P = %s, α_F = %s", $1, $2, $3 }')), fleet_report_interval = $FLEET_INTERVAL s;"
  echo "clients spread over the proxies round robin in arrival order, the same sessions in every run."
  echo
  if [ ${#ins[@]} -gt 0 ]; then
    echo "### Contention ($DURATION s, window from $from s${base:+; ratios against one proxy})"
    echo
    cat "$OUT/fleet-contention.md"
    echo
    case " ${ran[*]} " in *" fleet "*)
      case " ${ran[*]} " in *" independent "*)
        echo "Fleet against $PROXIES independent proxies: premium p95 $(p95_ratio fleet independent premium)× (the issue's bar: at most 0.8×), freemium p95 $(p95_ratio fleet independent freemium)×."
        echo ;;
      esac
      read -r av at rounds <<<"$(agreement fleet)"
      read -r vmin vmax vdec <<<"$(versions fleet)"
      echo "Agreement over $rounds rounds of SHOW FLEET and SHOW REPLICAS on every proxy (every $FLEET_SAMPLE s): all proxies on the same role-table version in **$av %** of the rounds (the issue's bar: 99 %); all routing with the same roles in **$at %**. Versions $vmin to $vmax, $vdec decreases."
      echo ;;
    esac
  fi
  if [ -n "$fleet_note" ]; then
    echo "**Fleet: not measured.** $fleet_note."
    echo
  fi
  for s in "${scenarios_run[@]}"; do
    t0="$(cat "$OUT/$s-start")"
    read -r av at rounds <<<"$(agreement "$s")"
    read -r vmin vmax vdec <<<"$(versions "$s")"
    case "$s" in
      leader-kill)
        IFS=, read -r kill_at _ killed member < <(awk -F, '$2 == "killleader"' "$OUT/$s-actions.csv")
        echo "### Leader kill ($FLEET_SCENARIO_DURATION s; SIGKILL of the leader at 1/3, restarted at 2/3)"
        echo
        if [ "${killed:-none}" = none ] || [ -z "${killed:-}" ]; then
          echo "No leader was named when the kill was due; nothing was killed."
        else
          new="$(awk -F, -v t="$kill_at" -v k="$killed" -v m="$member" 'NR > 1 && $2 > t && $3 != k && $4 != "down" && $7 != "" && $7 != m { printf "%.2f %s", $2 - t, $7; exit }' "$OUT/$s-fleet.csv")"
          read -r new_after new_leader <<<"${new:-none -}"
          echo "- killed: proxy $killed ($member) at $(awk -v a="$kill_at" -v b="$t0" 'BEGIN { printf "%.1f", a - b }') s"
          if [ "$new_after" = none ]; then
            echo "- new leader: **none seen** by the surviving proxies"
          else
            echo "- new leader: $new_leader (proxy $(proxy_of_member "$new_leader")), first seen $new_after s after the kill ($(awk -v a="$new_after" -v i="$FLEET_INTERVAL" 'BEGIN { printf "%.1f", a / i }') intervals; the issue's bar: 2), sampled every $FLEET_SAMPLE s"
          fi
          echo "- errors seen by the clients of the surviving proxies: **$(client_errors "$s" "!$killed")** (the bar: 0); of the killed proxy: $(client_errors "$s" "$killed") (its connections die with it, and the sessions the load balancer sends it while it is down cannot connect)"
          echo "- versions seen: $vmin to $vmax, $vdec decreases on any proxy (the bar: only increasing); all live proxies on one version in $av % of $rounds rounds"
        fi
        echo ;;
      store-outage)
        stop_at="$(awk -F, '$2 == "stopstore" { print $1 }' "$OUT/$s-actions.csv")"
        start_at="$(awk -F, '$2 == "startstore" { print $1 }' "$OUT/$s-actions.csv")"
        echo "### Store outage ($FLEET_SCENARIO_DURATION s; the store's PostgreSQL stopped at 1/3, started at 2/3)"
        echo
        echo "| proxy | local mode first seen after the stop | samples in local mode while the store was down | fleet mode again after the start | client errors |"
        echo "| --- | ---: | ---: | ---: | ---: |"
        for k in $(seq 0 $((PROXIES - 1))); do
          awk -F, -v k="$k" -v a="$stop_at" -v b="$start_at" 'NR > 1 && $3 == k {
              if ($2 > a && $2 < b) { n++; if ($4 == "local") { l++; if (first == "") first = $2 - a } }
              if ($2 > b && back == "" && $4 == "fleet") back = $2 - b }
            END { printf "| %s | %s | %d of %d | %s |", k, (first == "" ? "**never**" : sprintf("%.1f s", first)), l, n, (back == "" ? "**not seen**" : sprintf("%.1f s", back)) }' "$OUT/$s-fleet.csv"
          echo " $(client_errors "$s" "$k") |"
        done
        echo
        echo "All clients: $(client_errors "$s") (the bar: every proxy keeps serving). Versions $vmin to $vmax, $vdec decreases."
        echo ;;
    esac
  done
  echo "### Replica CPU (busy fraction of each quota over the run)"
  echo
  echo "| run | per replica u | cluster u | CV(u) |"
  echo "| --- | --- | ---: | ---: |"
  awk -F, 'NR > 1 { us[$1] = us[$1] (us[$1] == "" ? "" : " ") $4; s[$1] += $4; ss[$1] += $4 * $4; n[$1]++; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
    END { for (i = 1; i <= k; i++) { l = order[i]; m = s[l] / n[l]; v = ss[l] / n[l] - m * m; if (v < 0) v = 0;
      printf "| %s | %s | %.2f | %.2f |\n", l, us[l], m, (m > 0 ? sqrt(v) / m : 0) } }' "$OUT/replica_cpu.csv"
} >"$OUT/fleet.md"
cat "$OUT/fleet.md"
echo
echo "per-query rows: $OUT/<run>.csv; proxies per session: $OUT/<run>-proxies.csv; fleet samples: $OUT/<run>-fleet.csv"
