#!/usr/bin/env bash
# Shows whether this machine hands freed memory back to its host (virtio_balloon free page
# reporting) and what that does to the kernel's page-cache writes: three `dd` writes of
# 2 GB, the file deleted between them (the second right away, the third after 15 s), with
# the system time of each and the MiB the guest reported to its host meanwhile.
# The figures behind docs/BENCHMARKS.md "Side by side with the 65b7347 binary".
set -euo pipefail
param=/sys/module/page_reporting/parameters
if [[ -r $param/reported_kib ]]; then
  echo "page reporting: order $(cat $param/page_reporting_order), $(( $(cat $param/reported_kib) / 1048576 )) GiB reported since boot"
else
  echo "no free page reporting on this machine"
fi
file=${TMPDIR:-/tmp}/page-reporting-probe.$$
trap 'rm -f "$file"' EXIT
reported() { [[ -r $param/reported_kib ]] && cat $param/reported_kib || echo 0; }
for i in 1 2 3; do
  before=$(reported)
  /usr/bin/time -f "dd run $i: %e s wall, %S s system" \
    dd if=/dev/zero of="$file" bs=256K count=8192 status=none
  echo "  reported to the host meanwhile: $(( ($(reported) - before) / 1024 )) MiB"
  rm -f "$file"
  if [[ $i == 2 ]]; then sleep 15; fi
done
before=$(reported); sleep 5
echo "reported in the 5 s after the last delete: $(( ($(reported) - before) / 1024 )) MiB"
