"""One self-contained POSIX ``sh`` + ``awk`` script per node: the fake nvidia-smi injected into containers.

Containers (busybox, ubuntu, CUDA images) have ``/bin/sh`` and ``awk`` but rarely Python and never
fakegpu, so the script carries everything: the node's pre-rendered fragments (the same ones the Python
renderer assembles, index placeholders included) after an ``exit`` line, where the shell never reads
them and awk, given the script's own path (``$0``), finds them; no here-document, so no temporary file
either (bash writes large ones to $TMPDIR, which a read-only container may not have). The awk program
does at run time what ``command.run`` does: resolve the visible devices (``FAKEGPU_VISIBLE_DEVICES``, else
``NVIDIA_VISIBLE_DEVICES``, else none: inside a container nothing unnamed is visible), number them, apply
``-i``, check ``--format`` and the query fields, and print. The shell part only parses the arguments
(unknown options and missing values are reported there, as nvidia-smi reports them before anything else)
and lists the ``volume-mounts`` directory. Only ``date`` is called, for the table's and ``-q``'s
timestamp and the ``timestamp`` query field (``FAKEGPU_NVIDIA_SMI_TIME`` and
``FAKEGPU_NVIDIA_SMI_QUERY_TIME`` override them, for reproducible output).

Data records are tab-separated lines: ``S`` fixed sections, ``G``/``GT``/``GL``/``GA``/``GZ``/``GC`` a
GPU's identity (with its ``-lgip`` template, ``topo -m`` cells towards every GPU of the node and the order
``mig -lgi`` lists its instances in), table rows, ``-L`` line, ``-q`` parts before and after its MIG
devices and modelled query values (a field without one is ``[N/A]``), ``GX`` the end of its ``topo -m``
row, ``GE`` the error line printed instead of a GPU off the bus or lost, ``PT``/``PA``/``PZ``/``PC`` the
lines and values that differ when the GPU is seen through some of its MIG devices only (by line number or
field), ``M`` a MIG device (static instance or dynamic option, its UUID, GPU-instance ID, start slot and
templates), ``TT``/``TQ``/``TL`` the table, ``-q`` and ``-L``
templates MIG devices of one shape share, ``TP``/``TG``/``TC`` the ``mig -lgip``/``-lgi``/``-lci``
templates GPUs and instances of one shape share, ``QF``/``QA`` query fields and aliases; ``V`` first and
``Z`` last, the content's generation: the daemon rewrites the file in place (so a running container's bind
mount sees faults struck after it started), and a read that straddles a rewrite finds them different and
is retried by the shell part, which stays byte for byte the same across rewrites.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from fakegpu.telemetry.fault_readings import GPU_LOST_STATUS, gpu_lost_line
from fakegpu.telemetry.nvidia_smi import list as gpu_list
from fakegpu.telemetry.nvidia_smi import mig_tables, query, query_full, table, topology
from fakegpu.telemetry.nvidia_smi.command import INVALID_COMBINATION, NO_DEVICES, help_text, version_text
from fakegpu.telemetry.nvidia_smi.devices import VOLUME_MOUNTS_ROOT, SmiNode

TIME_OVERRIDE_ENV: Final = "FAKEGPU_NVIDIA_SMI_TIME"
QUERY_TIME_OVERRIDE_ENV: Final = "FAKEGPU_NVIDIA_SMI_QUERY_TIME"
"""Overrides the ``timestamp`` query field (``YYYY/MM/DD HH:MM:SS.mmm``), for reproducible output."""
_DELIMITER: Final = "FAKEGPU_NVIDIA_SMI_DATA"
NO_AWK_STATUS: Final = 255
"""nvidia-smi's "other error": the image has no awk (or the script kept changing while read)."""
TORN_STATUS: Final = 75
"""The awk program's answer to a data section whose first and last generation records differ: the daemon
rewrote the file while awk read it (``nvidia_smi_files`` rewrites it in place), so the shell reads it again."""
TORN_RETRIES: Final = 20

# Mirrors command.run step by step; see the module docstring for the records it reads. Lists are cut with
# csplit, Python's str.split(","): the one true awk's split() also cuts at newlines, and splits "" into none.
AWK_PROGRAM: Final = r"""
function rest(n,   c, i) { c = $0; for (i = 0; i < n; i++) c = substr(c, index(c, "\t") + 1); return c }
function csplit(s, a,   n, p) {
  n = 0
  while ((p = index(s, ",")) > 0) { a[++n] = substr(s, 1, p - 1); s = substr(s, p + 1) }
  a[++n] = s
  return n
}
function trim(s) { sub(/^[ \t\n\r]+/, "", s); sub(/[ \t\n\r]+$/, "", s); return s }
function section(name,   i) { for (i = 1; i <= sc[name]; i++) print sl[name, i] }
function rep(s, t, v,   p, o) {
  o = ""
  while ((p = index(s, t)) > 0) { o = o substr(s, 1, p - 1) v; s = substr(s, p + length(t)) }
  return o s
}
function fill(s) {
  s = rep(s, "@N@", att)
  s = rep(s, "@G4@", sprintf("%4d", vg)); s = rep(s, "@G3@", sprintf("%3d", vg)); s = rep(s, "@G@", vg)
  s = rep(s, "@M3@", sprintf("%3d", vm)); s = rep(s, "@M2@", sprintf("%2d", vm)); s = rep(s, "@M@", vm)
  s = rep(s, "@I4@", sprintf("%4d", vi)); s = rep(s, "@I@", vi); s = rep(s, "@S@", vs); s = rep(s, "@U@", vu)
  return rep(s, "@TS@", ts)
}
function section_filled(name,   i) { for (i = 1; i <= sc[name]; i++) print fill(sl[name, i]) }
function template(kind, t,   i) { for (i = 1; i <= xc[kind, t]; i++) print fill(xl[kind, t, i]) }
function gpu_line(whole, partial, i) { return ((k in vpart) && ((k, i) in partial)) ? partial[k, i] : whole[k, i] }
BEGIN { FS = "\t" }
!data { if ($0 == "FAKEGPU_NVIDIA_SMI_DATA") data = 1; next }
$1 == "V" { vgen = $2; next }
$1 == "Z" { zgen = $2; next }
$1 == "S" { sc[$2]++; sl[$2, sc[$2]] = rest(2); next }
$1 == "G" {
  ng++; gid[ng] = $2; guu[ng] = $3; gbus[ng] = $4; gmig[ng] = $5; glp[ng] = $6 + 0; gcl[ng] = $7; gord[ng] = $8
  gat[$2] = ng; next
}
$1 == "GX" { gx[gat[$2]] = rest(2); next }
$1 == "GE" { gge[gat[$2]] = rest(2); next }
$1 == "GT" { k = gat[$2]; gtc[k]++; gtl[k, gtc[k]] = rest(2); next }
$1 == "PT" { ptl[gat[$2], $3] = rest(3); next }
$1 == "GL" { gll[gat[$2]] = rest(2); next }
$1 == "GA" { k = gat[$2]; gac[k]++; gal[k, gac[k]] = rest(2); next }
$1 == "PA" { pal[gat[$2], $3] = rest(3); next }
$1 == "GZ" { k = gat[$2]; gzc[k]++; gzl[k, gzc[k]] = rest(2); next }
$1 == "PZ" { pzl[gat[$2], $3] = rest(3); next }
$1 == "GC" { k = gat[$2]; gcu[k, $3] = $4; gcn[k, $3] = $5; next }
$1 == "PC" { k = gat[$2]; pcu[k, $3] = $4; pcn[k, $3] = $5; next }
$1 == "M" {
  k = gat[$2]; mc[k]++; j = mc[k]; mid[k, j] = $3; muu[k, j] = $4; mgi[k, j] = $5; mop[k, j] = $6
  mtt[k, j] = $7; mtq[k, j] = $8; mtl[k, j] = $9; mtg[k, j] = $10; mtc[k, j] = $11; mst[k, j] = $12; next
}
$1 == "TP" || $1 == "TG" || $1 == "TC" { xc[$1, $2]++; xl[$1, $2, xc[$1, $2]] = rest(2); next }
$1 == "TT" { ttc[$2]++; ttl[$2, ttc[$2]] = rest(2); next }
$1 == "TL" { tll[$2] = rest(2); next }
$1 == "TQ" { tqc[$2]++; tql[$2, tqc[$2]] = rest(2); next }
$1 == "QF" { qh[$2] = $3; next }
$1 == "QA" { qa[$2] = $3; next }
END {
  if (vgen == "" || vgen != zgen) exit @TORN@
  mode = ENVIRON["FGS_MODE"]; ts = ENVIRON["FGS_TIME"]
  if (mode == "help") { section("help"); exit 0 }
  if (mode == "version") { section("version"); exit 0 }
  if (ENVIRON["FGS_CONFLICT"] == "1") { section("invalid"); exit 2 }
  hasfmt = (ENVIRON["FGS_HAS_FORMAT"] == "1")
  if (mode != "query" && hasfmt) { section("invalid"); exit 2 }
  if (mode == "topo" || mode == "mig") { section("invalid"); exit 2 }
  if (mode == "matrix" && ENVIRON["FGS_HAS_IDS"] == "1") { section("topoid"); exit 2 }
  if (mode == "query") {
    if (!hasfmt) { section("invalid"); exit 2 }
    nt = csplit(ENVIRON["FGS_FORMAT"], ft)
    csv = 0; noheader = 0; nounits = 0; bad = 0
    for (i = 1; i <= nt; i++) {
      if (ft[i] == "csv") csv = 1
      else if (ft[i] == "noheader") noheader = 1
      else if (ft[i] == "nounits") nounits = 1
      else bad = 1
    }
    if (!csv || bad) { section("invalid"); exit 2 }
    if (ENVIRON["FGS_FIELDS"] == "") { section("invalid"); exit 2 }
    nq = csplit(ENVIRON["FGS_FIELDS"], fl)
    for (i = 1; i <= nq; i++) {
      f = fl[i]
      if (f in qh) fc[i] = f
      else if (f in qa) fc[i] = qa[f]
      else { print "Field \"" f "\" is not a valid field to query."; print ""; exit 2 }
    }
  }
  if (ENVIRON["FGS_VISIBLE_SET"] == "1") value = trim(ENVIRON["FGS_VISIBLE"]); else value = ""
  if (value == "all") { for (k = 1; k <= ng; k++) whole[k] = 1 }
  else if (value != "" && value != "none" && value != "void") {
    nt = csplit(value, tk)
    for (i = 1; i <= nt; i++) {
      t = trim(tk[i]); p = index(t, "::"); if (p) t = substr(t, 1, p - 1)
      isnum = (t ~ /^[0-9]+$/); ispair = (t ~ /^[0-9]+:[0-9]+$/)
      if (ispair) { split(t, pr, ":"); pg = pr[1] + 0; pm = pr[2] + 0 }
      for (k = 1; k <= ng; k++) {
        if (t == guu[k] || (isnum && t + 0 == gid[k] + 0)) whole[k] = 1
        for (j = 1; j <= mc[k]; j++)
          if (t == muu[k, j] || (ispair && mop[k, j] == "0" && pg == gid[k] + 0 && pm == mid[k, j] + 0))
            part[k, j] = 1
      }
    }
  }
  nv = 0
  for (k = 1; k <= ng; k++) {
    cnt = 0
    if (k in whole) {
      if (gmig[k] == "1") for (j = 1; j <= mc[k]; j++) if (mop[k, j] == "0") { vmj[k, ++cnt] = j; vis[k, j] = 1 }
    } else {
      for (j = 1; j <= mc[k]; j++) if ((k, j) in part) { vmj[k, ++cnt] = j; vis[k, j] = 1 }
      if (!cnt) continue
      vpart[k] = 1
    }
    nv++; vk[nv] = k; vmc[k] = cnt
  }
  if (!nv) { section("nodev"); exit 6 }
  ns = 0
  if (ENVIRON["FGS_HAS_IDS"] == "1") {
    ni = csplit(ENVIRON["FGS_IDS"], il)
    for (v = 1; v <= nv; v++) {
      k = vk[v]; bus = toupper(gbus[k])
      for (i = 1; i <= ni; i++) {
        t = trim(il[i]); u = toupper(t)
        if ((t ~ /^[0-9]+$/ && t + 0 == v - 1) || u == toupper(guu[k]) || u == bus || u == substr(bus, 5)) {
          sel[v] = 1; ns++; break
        }
      }
    }
  } else for (v = 1; v <= nv; v++) { sel[v] = 1; ns++ }
  if (!ns) { section("nodev"); exit 6 }
  att = nv
  lost = 0
  for (v = 1; v <= nv; v++) if ((v in sel) && (vk[v] in gge)) { print gge[vk[v]]; lost = 1 }
  if (lost) exit @LOST@
  if (mode == "matrix") {
    line = ""
    for (v = 1; v <= nv; v++) line = line "\tGPU" (v - 1)
    print line "\t" sl["topohead", 1]
    for (v = 1; v <= nv; v++) {
      k = vk[v]; csplit(gcl[k], cl); line = "GPU" (v - 1)
      for (w = 1; w <= nv; w++) line = line "\t" cl[vk[w]]
      print line "\t" gx[k]
    }
    section("legend"); exit 0
  }
  if (mode == "lgip") {
    n = 0
    for (v = 1; v <= nv; v++) if ((v in sel) && glp[vk[v]]) n++
    if (!n) { section("nomigdev"); exit 6 }
    section("lgiphead")
    for (v = 1; v <= nv; v++) if ((v in sel) && glp[vk[v]]) { vg = v - 1; template("TP", glp[vk[v]]) }
    exit 0
  }
  if (mode == "lgi" || mode == "lci") {
    en = 0; rows = 0
    for (v = 1; v <= nv; v++) if (v in sel) {
      k = vk[v]
      if (gmig[k] != "1" && !(k in vpart)) continue
      en++
      if (gord[k] == "") continue
      no = csplit(gord[k], od)
      for (i = 1; i <= no; i++) if ((k, od[i] + 0) in vis) { rows++; ov[rows] = v; oj[rows] = od[i] + 0 }
    }
    if (!en) { section("nomigdev"); exit 6 }
    if (!rows) { section(mode == "lgi" ? "nogi" : "noci"); exit 6 }
    section(mode == "lgi" ? "lgihead" : "lcihead")
    for (i = 1; i <= rows; i++) {
      v = ov[i]; k = vk[v]; j = oj[i]; vg = v - 1; vi = mgi[k, j]; vs = mst[k, j]
      if (mode == "lgi") template("TG", mtg[k, j]); else template("TC", mtc[k, j])
    }
    exit 0
  }
  if (mode == "list") {
    for (v = 1; v <= nv; v++) if (v in sel) {
      k = vk[v]; vg = v - 1; print fill(gll[k])
      for (n = 1; n <= vmc[k]; n++) { vm = n - 1; j = vmj[k, n]; vu = muu[k, j]; print fill(tll[mtl[k, j]]) }
    }
    exit 0
  }
  if (mode == "full") {
    section_filled("qhead")
    for (v = 1; v <= nv; v++) if (v in sel) {
      k = vk[v]
      for (i = 1; i <= gac[k]; i++) print gpu_line(gal, pal, i)
      if (vmc[k]) {
        section("qmig")
        for (n = 1; n <= vmc[k]; n++) {
          vm = n - 1; j = vmj[k, n]; vi = mgi[k, j]; t = mtq[k, j]
          for (i = 1; i <= tqc[t]; i++) print fill(tql[t, i])
        }
      }
      for (i = 1; i <= gzc[k]; i++) print gpu_line(gzl, pzl, i)
    }
    exit 0
  }
  if (mode == "query") {
    if (!noheader) {
      line = ""
      for (i = 1; i <= nq; i++) line = line (i > 1 ? ", " : "") qh[fc[i]]
      print line
    }
    for (v = 1; v <= nv; v++) if (v in sel) {
      k = vk[v]; line = ""
      for (i = 1; i <= nq; i++) {
        f = fc[i]
        if (f == "index") x = v - 1
        else if (f == "count") x = nv
        else if (f == "timestamp") x = ENVIRON["FGS_QUERY_TIME"]
        else if ((k in vpart) && ((k, f) in pcu)) x = nounits ? pcn[k, f] : pcu[k, f]
        else if ((k, f) in gcu) x = nounits ? gcn[k, f] : gcu[k, f]
        else x = "[N/A]"
        line = line (i > 1 ? ", " : "") x
      }
      print line
    }
    exit 0
  }
  section_filled("date")
  section("head")
  anymig = 0
  for (v = 1; v <= nv; v++) if (v in sel) {
    k = vk[v]; vg = v - 1
    for (i = 1; i <= gtc[k]; i++) print fill(gpu_line(gtl, ptl, i))
    section("gpusep")
    if (gmig[k] == "1" || (k in vpart)) anymig = 1
  }
  if (anymig) {
    section("mighead")
    shown = 0
    for (v = 1; v <= nv; v++) if (v in sel) {
      k = vk[v]; vg = v - 1
      for (n = 1; n <= vmc[k]; n++) {
        vm = n - 1; j = vmj[k, n]; vi = mgi[k, j]; t = mtt[k, j]
        for (i = 1; i <= ttc[t]; i++) print fill(ttl[t, i])
        section("migsep"); shown++
      }
    }
    if (!shown) section("nomig")
  }
  section("procs")
  exit 0
}
"""

_SHELL_HEAD: Final = r"""#!/bin/sh
# nvidia-smi for fakegpu node @NODE@: fake GPUs, generated by fakegpu; every run re-reads
# FAKEGPU_VISIBLE_DEVICES, else NVIDIA_VISIBLE_DEVICES. Needs only sh and awk. Do not edit: the device
# plugin or DRA driver rewrites it.
set -f
mode=table fields= fmt= has_fmt=0 ids= has_ids=0 report= conflict=0 sub=
case ${1-} in topo|mig) sub=$1 mode=$1; shift ;; esac
while [ "$#" -gt 0 ]; do
  case $sub:$1 in
    :--query-gpu|:--format|*:-i|*:--id)
      if [ "$#" -lt 2 ]; then
        printf "ERROR: Option %s is missing its value. Please run 'nvidia-smi -h' for help.\n\n" "$1"
        exit 2
      fi
      case $1 in
        --query-gpu) mode=query fields=$2 ;;
        --format) fmt=$2 has_fmt=1 ;;
        *) ids=$2 has_ids=1 ;;
      esac
      shift ;;
    :-L|:--list-gpus) mode=list ;;
    :-q|:--query) mode=full ;;
    :--query-gpu=*) mode=query fields=${1#--query-gpu=} ;;
    :--format=*) fmt=${1#--format=} has_fmt=1 ;;
    *:--id=*) ids=${1#--id=} has_ids=1 ;;
    *:-h|*:--help) mode=help ;;
    :--version) mode=version ;;
    topo:-m|topo:--matrix) mode=matrix ;;
    mig:-lgip|mig:--list-gpu-instance-profiles) mode=lgip ;;
    mig:-lgi|mig:--list-gpu-instances) mode=lgi ;;
    mig:-lci|mig:--list-compute-instances) mode=lci ;;
    *)
      printf "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h' for help.\n\n" "$1"
      exit 2 ;;
  esac
  case $mode in
    list|full|query|lgip|lgi|lci)
      if [ -n "$report" ] && [ "$report" != "$mode" ]; then conflict=1; fi
      report=$mode ;;
  esac
  shift
done
visible_set=0 visible=
if [ "${FAKEGPU_VISIBLE_DEVICES+set}" = set ]; then
  visible_set=1 visible=$FAKEGPU_VISIBLE_DEVICES
elif [ "${NVIDIA_VISIBLE_DEVICES+set}" = set ]; then
  visible_set=1 visible=$NVIDIA_VISIBLE_DEVICES
  if [ "$visible" = '@ROOT@' ]; then
    visible=
    set +f
    for f in '@ROOT@'/*; do
      [ -e "$f" ] || continue
      visible=$visible${visible:+,}${f##*/}
    done
    set -f
  fi
fi
ts= qts=
case $mode in
  table|full) ts=${@TIME_ENV@:-$(LC_ALL=C date '+%a %b %e %H:%M:%S %Y')} ;;
  query)
    case ,$fields, in
      *,timestamp,*)
        qts=${@QTIME_ENV@-}
        if [ -z "$qts" ]; then
          qts=$(LC_ALL=C date '+%Y/%m/%d %H:%M:%S.%N')
          case ${qts##*.} in
            [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) qts=${qts%??????} ;;
            *) qts=${qts%.*}.000 ;;
          esac
        fi ;;
    esac ;;
esac
if ! command -v awk >/dev/null 2>&1; then
  echo "nvidia-smi (fakegpu): this image has no awk; the fake nvidia-smi needs sh and awk" >&2
  exit @NO_AWK@
fi
tries=0
while :; do
  FGS_MODE=$mode FGS_FIELDS=$fields FGS_FORMAT=$fmt FGS_HAS_FORMAT=$has_fmt FGS_IDS=$ids FGS_HAS_IDS=$has_ids \
  FGS_CONFLICT=$conflict FGS_VISIBLE=$visible FGS_VISIBLE_SET=$visible_set FGS_TIME=$ts FGS_QUERY_TIME=$qts \
  awk '@AWK@' "$0"
  status=$?
  if [ "$status" -ne @TORN@ ] || [ "$tries" -ge @TRIES@ ]; then break; fi
  tries=$((tries + 1))
done
if [ "$status" -eq @TORN@ ]; then
  echo "nvidia-smi (fakegpu): the script kept changing while it was read; run it again" >&2
  exit @NO_AWK@
fi
exit "$status"
@DELIM@
"""


def _check_line(line: str, *, tabs: bool = False) -> str:
    if ("\t" in line and not tabs) or "\n" in line or line == _DELIMITER:
        raise ValueError(f"cannot embed {line!r} in the nvidia-smi script")
    return line


def _records(kind: str, keys: Iterable[object], lines: Iterable[str], *, tabs: bool = False) -> list[str]:
    """One record per line; ``tabs``: lines the awk reads whole with ``rest``, so they may hold tabs."""
    prefix = "\t".join([kind, *(str(k) for k in keys)])
    return [f"{prefix}\t{_check_line(line, tabs=tabs)}" for line in lines]


def _text_lines(text: str) -> list[str]:
    return text.split("\n")[:-1]


def _changed(kind: str, gpu: int, whole: tuple[str, ...], partial: tuple[str, ...]) -> list[str]:
    """The lines of the partial view that differ from the whole GPU's, by line number (from 1)."""
    if len(whole) != len(partial):
        raise AssertionError("a GPU's partial view must have as many lines as the whole GPU's")
    pairs = enumerate(zip(whole, partial, strict=True), 1)
    return [f"{kind}\t{gpu}\t{i}\t{_check_line(p)}" for i, (w, p) in pairs if w != p]


def _template(kind: str, lines: tuple[str, ...], ids: dict[tuple[str, ...], int], out: list[str]) -> int:
    """The id of these MIG lines, emitting them the first time: devices of one shape share them."""
    if lines not in ids:
        ids[lines] = len(ids) + 1
        out += _records(kind, [ids[lines]], lines)
    return ids[lines]


def data_records(node: SmiNode) -> list[str]:
    """Everything the awk program reads, in the order it expects (GPU before its MIG devices, a MIG
    template before the first device using it), between two records naming the content's generation (a hash
    of it): awk refuses a file whose two differ, which is what a read during an in-place rewrite sees."""
    records = _content_records(node)
    generation = hashlib.sha256("\n".join(records).encode()).hexdigest()[:16]
    return [f"V\t{generation}", *records, f"Z\t{generation}"]


def _content_records(node: SmiNode) -> list[str]:
    out: list[str] = []
    sections: dict[str, Iterable[str]] = {
        "date": [table.DATE_LINE],
        "head": table.head(node),
        "gpusep": [table.GPU_SEPARATOR],
        "mighead": table.MIG_HEAD,
        "migsep": [table.MIG_SEPARATOR],
        "nomig": table.NO_MIG_DEVICES,
        "procs": table.PROCESSES,
        "qhead": query_full.head(node),
        "qmig": [query_full.MIG_DEVICES],
        "help": _text_lines(help_text(node)),
        "version": _text_lines(version_text(node)),
        "invalid": _text_lines(INVALID_COMBINATION),
        "nodev": _text_lines(NO_DEVICES),
        "legend": topology.LEGEND,
        "topoid": _text_lines(topology.NO_ID_OPTION),
        "lgiphead": mig_tables.profiles_head(node),
        "lgihead": mig_tables.instances_head(node),
        "lcihead": mig_tables.COMPUTE_HEAD,
        "nomigdev": _text_lines(mig_tables.NO_MIG_DEVICES),
        "nogi": _text_lines(mig_tables.NO_GPU_INSTANCES),
        "noci": _text_lines(mig_tables.NO_COMPUTE_INSTANCES),
    }
    for name, lines in sections.items():
        out += _records("S", [name], lines)
    out += _records("S", ["topohead"], [topology.HEAD_TAIL], tabs=True)
    for f in query.FIELDS:
        out.append(f"QF\t{f.name}\t{f.header}")
        out += [f"QA\t{alias}\t{f.name}" for alias in f.aliases]
    table_ids: dict[tuple[str, ...], int] = {}
    full_ids: dict[tuple[str, ...], int] = {}
    list_ids: dict[tuple[str, ...], int] = {}
    profile_ids: dict[tuple[str, ...], int] = {}
    instance_ids: dict[tuple[str, ...], int] = {}
    compute_ids: dict[tuple[str, ...], int] = {}
    for g in node.gpus:
        lgip = _template("TP", mig_tables.profile_rows(node, g), profile_ids, out) if g.mig_profiles else 0
        devices = [*g.migs, *g.mig_options]
        position = {id(m): n for n, m in enumerate(devices, 1)}
        order = ",".join(str(position[id(m)]) for m in mig_tables.listing_order(g, devices))
        cells = ",".join(topology.cells(node, g))
        mig_on = "1" if g.mig_enabled else "0"
        out.append("\t".join(["G", str(g.index), _check_line(g.uuid), g.bus_id, mig_on, str(lgip), cells, order]))
        out += _records("GX", [g.index], [topology.row_tail(g)], tabs=True)
        if g.health.unreachable:
            out += _records("GE", [g.index], [gpu_lost_line(g.bus_id)])
        out += _records("GT", [g.index], table.gpu_rows(g))
        out += _records("GL", [g.index], [gpu_list.gpu_line(g)])
        out += _records("GA", [g.index], query_full.gpu_head(g))
        out += _records("GZ", [g.index], query_full.gpu_tail(g))
        whole = query.gpu_values(node, g)
        for name, (units, nounits) in whole.items():
            out.append("\t".join(["GC", str(g.index), name, _check_line(units), _check_line(nounits)]))
        if not g.migs and not g.mig_options:
            continue
        # As a container given only some of its MIG devices sees it: only what differs from the whole GPU.
        out += _changed("PT", g.index, table.gpu_rows(g), table.gpu_rows(g, partial=True))
        out += _changed("PA", g.index, query_full.gpu_head(g), query_full.gpu_head(g, partial=True))
        out += _changed("PZ", g.index, query_full.gpu_tail(g), query_full.gpu_tail(g, partial=True))
        partial = query.gpu_values(node, g, partial=True)
        if set(partial) != set(whole):
            raise AssertionError("a GPU's partial view must model the same query fields as the whole GPU")
        for name, (units, nounits) in partial.items():
            if (units, nounits) != whole[name]:
                out.append("\t".join(["PC", str(g.index), name, _check_line(units), _check_line(nounits)]))
        for option, m in [(False, m) for m in g.migs] + [(True, m) for m in g.mig_options]:
            tt = _template("TT", table.mig_rows(m), table_ids, out)
            tq = _template("TQ", query_full.mig_block(m), full_ids, out)
            tl = _template("TL", (gpu_list.mig_line(m),), list_ids, out)
            tg = _template("TG", mig_tables.instance_rows(node, g, m), instance_ids, out)
            tc = _template("TC", mig_tables.compute_rows(g, m), compute_ids, out)
            fields = [str(g.index), str(m.index), _check_line(m.uuid), str(m.gi_id), "1" if option else "0"]
            templates = [str(t) for t in (tt, tq, tl, tg, tc)]
            out.append("\t".join(["M", *fields, *templates, str(m.start)]))
    return out


def render_script(node: SmiNode, *, volume_mounts_root: str = VOLUME_MOUNTS_ROOT) -> str:
    """The script for ``node``; ``volume_mounts_root`` is NVIDIA's directory (tests point it elsewhere)."""
    if "'" in AWK_PROGRAM:
        raise AssertionError("the awk program is single-quoted in the script and must not contain '")
    for value, what in ((volume_mounts_root, "volume-mounts root"), (node.name, "node name")):
        if "'" in value or "\n" in value:
            raise ValueError(f"{what} {value!r} cannot be embedded in the nvidia-smi script")
    head = (
        _SHELL_HEAD.replace("@ROOT@", volume_mounts_root)
        .replace("@TIME_ENV@", TIME_OVERRIDE_ENV)
        .replace("@QTIME_ENV@", QUERY_TIME_OVERRIDE_ENV)
        .replace("@NO_AWK@", str(NO_AWK_STATUS))
        .replace("@DELIM@", _DELIMITER)
        .replace("@TORN@", str(TORN_STATUS))
        .replace("@TRIES@", str(TORN_RETRIES))
        .replace(
            "@AWK@",
            AWK_PROGRAM.strip("\n").replace("@LOST@", str(GPU_LOST_STATUS)).replace("@TORN@", str(TORN_STATUS)),
        )
        .replace("@NODE@", node.name)
    )
    return head + "".join(line + "\n" for line in data_records(node))
