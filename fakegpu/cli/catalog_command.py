"""``fakegpu catalog``: the boards fakegpu can emulate, with their numbers and what is unverified, and the
README's Boards table (``--markdown``)."""

from __future__ import annotations

import re

from fakegpu.sharing.catalog import CATALOG, GpuModel
from fakegpu.sharing.labels import gpu_family, sanitize_product


def render_catalog(verbose: bool) -> str:
    lines = [
        f"{'KEY':<11} {'PRODUCT NAME':<24} {'MEMORY MiB':>10} {'SMs':>4} {'CC':>5} {'FAMILY':<13} "
        f"{'PCI ID':<11} MIG PROFILES"
    ]
    for m in CATALOG.values():
        cc = f"{m.compute_capability[0]}.{m.compute_capability[1]}"
        profiles = ", ".join(p.name for p in m.mig_profiles) or "-"
        lines.append(
            f"{m.key:<11} {m.product_name:<24} {m.memory_mib:>10} {m.multiprocessors:>4} {cc:>5} "
            f"{gpu_family(m.compute_capability):<13} {m.pci_device_id_hex:<11} {profiles}"
        )
        if verbose:
            lines.append(f"    board: {m.board}; gpu.product label: {sanitize_product(m.product_name)}")
            f = m.facts
            lines.append(
                f"    power: limit {f.power_limit_w} W (min {f.power_min_w} W), idle {f.idle_power_w:.2f} W "
                f"{f.idle_temp_c} C {f.idle_pstate}, loaded {f.load_temp_c} C (estimated); fan {f.fan}; "
                f"BAR1 {f.bar1_mib} MiB, reserved {f.reserved_mib} MiB; PCIe gen{f.pcie_gen} x{f.pcie_width}"
            )
            for p in m.mig_profiles:
                starts = ",".join(str(s) for s in p.placements)
                lines.append(
                    f"    {p.name:<14} {p.gi_profile:<14} {p.memory_mib:>6} MiB {p.multiprocessors:>3} SMs "
                    f"max {p.max_instances} starts {{{starts}}}:{p.memory_slices} "
                    f"CE/DEC/ENC/JPG/OFA {p.copy_engines}/{p.decoders}/{p.encoders}/{p.jpeg}/{p.ofa}"
                )
            for note in (*m.unverified, *f.unverified):
                lines.append(f"    unverified: {note}")
    return "\n".join(lines) + "\n"


UNVERIFIED_MARKS = {
    "memory": " (unverified)",
    "sms": " (unverified)",
    "cc": " (unverified)",
    "mig": " (partly unverified)",
}
"""What a Boards table cell gets when the board's ``unverified`` notes (``fakegpu catalog -v``) cover it: the
MIG cell sums up a table of profiles, of which the notes doubt some figures, not the counts shown."""
NOTE_COLUMNS: dict[str, re.Pattern[str]] = {
    "memory": re.compile(r"^memory\b"),
    "sms": re.compile(r"^multiprocessors\b"),
    "cc": re.compile(r"^compute capability\b"),
    "mig": re.compile(r"\bMIG\b|\bplacements\b|\+me\b|\b\d+g\.\d+gb\b"),
}
"""Which Boards table column a board's ``unverified`` note is about, by its wording: ``memory is ...`` the
memory, ``multiprocessors ...`` the SMs, ``compute capability ...`` the CC, anything naming MIG, placements
or a profile the MIG column."""
OFF_TABLE_NOTE = re.compile(r"^PCI device ID\b")
"""Notes about a number the table does not show; a test fails on a note that is neither this nor a column's."""


def unverified_columns(model: GpuModel) -> set[str]:
    """The Boards table columns (``NOTE_COLUMNS`` keys) that the board's own ``unverified`` notes cover. Its
    facts' notes are about idle power, BAR1, reserved memory and the like, which the table does not show."""
    return {column for note in model.unverified for column, pattern in NOTE_COLUMNS.items() if pattern.search(note)}


def _cell(column: str, text: str, unverified: set[str]) -> str:
    if column not in unverified:
        return text
    # "no" MIG is one claim, not a table of figures: it is unverified, not partly so.
    return text + (" (unverified)" if text == "no" else UNVERIFIED_MARKS[column])


def render_boards_table() -> str:
    """The README's "Boards" table, generated so it cannot drift from the catalog (a test compares them).
    A number the catalog marks unverified is marked here too, so the table never reads as all confirmed."""
    lines = [
        "| key | board | product name (nvidia-smi) | memory MiB | SMs | CC | MIG |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in CATALOG.values():
        doubted = unverified_columns(m)
        cc = f"{m.compute_capability[0]}.{m.compute_capability[1]}"
        mig = f"{len(m.mig_profiles)} profiles, {m.compute_slices} compute slices" if m.mig_capable else "no"
        lines.append(
            f"| `{m.key}` | {m.board} | {m.product_name} | {_cell('memory', str(m.memory_mib), doubted)} | "
            f"{_cell('sms', str(m.multiprocessors), doubted)} | {_cell('cc', cc, doubted)} | "
            f"{_cell('mig', mig, doubted)} |"
        )
    return "\n".join(lines) + "\n"
