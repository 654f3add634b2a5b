# Passes on only the error records of a Django or Celery log (with their tracebacks), each line
# prefixed with `prefix: ` (set with awk -v prefix=web). scripts/demo.sh tees the web server's and
# the worker's output through it, so a 500 or a failed task shows on the demo's terminal.
#
# A record starts with its level: `2026-11-27 16:20:01,123 ERROR django.request ...` (config/
# settings.py's LOGGING), `[2026-11-27 16:20:01,123: ERROR/ForkPoolWorker-1] ...` (Celery), or is a
# request line of runserver, `[27/Nov/2026 16:20:01] "GET / HTTP/1.1" 500 145`. Lines that start no
# record (a traceback) belong to the record before them.
/^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9:,.]+ [A-Z]+ / {
  shown = ($3 == "ERROR" || $3 == "CRITICAL")
}
/^\[[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9:,.]+: [A-Z]+\// {
  shown = ($0 ~ /^\[[^]]*: (ERROR|CRITICAL)\//)
}
/^\[[0-9][0-9]\/[A-Za-z]+\/[0-9]+ [0-9:]+\] "/ {
  shown = ($(NF - 1) ~ /^5[0-9][0-9]$/)
}
shown {
  print prefix ": " $0
  fflush()
}
