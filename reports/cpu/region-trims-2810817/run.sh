for i in 1 2 3 4 5 6; do
 for t in base new; do
  (cd /tmp/$t && /work/venv/bin/python tools/probe_flat_region.py --rounds 401 --out /tmp/trims/$t-$i.md > /dev/null 2>&1)
 done
done
echo done > /tmp/trims/DONE
