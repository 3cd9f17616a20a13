# parts.sh: what interop-gpu.sh and sleep-gpu.sh share, sourced by each
# after it has set these (and before the traps that call stop):
#
#   logs     the log folder
#   out      where the packed logs and the report go ("" for none)
#   pack     the packed logs' name in out (interop-logs.tgz, ...)
#   report   the Python script that reads logs and prints the verdict
#   budget   the run's seconds, counted from start (bash's SECONDS)
#   running  "PID NAME" of the part running now, "" between parts
#   run      what the run is called in the logs ("batch", "run")

# save packs logs into out/pack, where out is given: after every part, so
# that what ran comes back however the command ends.
save() {
  [ -n "$out" ] || return 0
  mkdir -p "$out"
  tar czf "$out/$pack.part" -C "$(dirname "$logs")" "$(basename "$logs")" &&
    mv "$out/$pack.part" "$out/$pack"
}

# stop SIGNAL stops the part running, if one is, lists it in failures.txt
# and finishes: the run got SIGNAL.
stop() {
  if [ -n "$running" ]; then
    kill -TERM "${running%% *}" 2>/dev/null
    echo "== ${running#* } [stopped: the $run got $1]" >>"$logs/commands.txt"
    echo "${running#* }: stopped, the $run got $1" >>"$logs/failures.txt"
  fi
  finish
}

# finish writes the report and packs the logs with it, once: at the end,
# or where the command is stopped (TERM, INT) before it. The report's last
# line is the run's verdict, and verdict its exit status.
finished=0 verdict=1
finish() {
  [ $finished = 0 ] || return 0
  finished=1
  echo "== the $run took $((SECONDS - start)) s of its budget of $budget" >>"$logs/commands.txt"
  python3 "$report" "$logs" >"$logs/report.txt" 2>&1
  verdict=$?
  cat "$logs/report.txt"
  save
  [ -z "$out" ] || cp "$logs/report.txt" "$out/report.txt"
}
