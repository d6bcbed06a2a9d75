"""The scheduler's DRA allocation for one node: which devices satisfy a pod's ResourceClaims.

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
allocator_stable.go`` and ``internal/incubating/allocator_incubating.go`` (v1.36, KEP-4381 with the
features NVIDIA's demos use): the claims of a pod are allocated together, request by request, each
device first-fit in pool and slice order, backtracking when a later request or a ``matchAttribute``
constraint cannot be met. A device matches a request when every selector of its DeviceClass and of the
request holds (CEL, :mod:`fakegpu.scheduling.cel_environment`); it is free when no claim holds it whole,
its ``NoSchedule``/``NoExecute`` taints are tolerated by the request, the shared counters it consumes are
left (KEP-4815) and, for a device with ``allowMultipleAllocations``, its consumable capacity still fits
(KEP-5075, :mod:`fakegpu.scheduling.consumable_capacity`). ``allocationMode: All`` takes every matching
device and fails if one of them is not free; ``firstAvailable`` tries its subrequests in order. The
allocation carries the DeviceClass configs (``FromClass``) and then the claim's (``FromClaim``).

Where the scheduler says "cannot allocate all claims", fakegpu's :class:`AllocationError` names the
claim, the request and why (no device matches, how many are taken, tainted or out of capacity). A CEL
error (a selector naming an attribute a device lacks) aborts the allocation, as in the scheduler.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fakegpu.scheduling.allocation_state import AllocatedState, CounterKey, allocated_state, device_counters
from fakegpu.scheduling.cel_environment import (
    CelCompileError,
    CelError,
    compile_selector,
    device_variable,
    selector_matches,
)
from fakegpu.scheduling.claim_requests import Request, Want, claim_requests
from fakegpu.scheduling.consumable_capacity import consumed_capacity, offers_at_least
from fakegpu.scheduling.device_pools import Device, DeviceId, NodeDevices, gather
from fakegpu.scheduling.lazy_matches import LazyMatches
from fakegpu.sharing.quantities import binary_quantity, decimal_quantity

MAX_STEPS = 100_000
"""Devices tried before the search gives up (the scheduler bounds its search by time instead)."""
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
SHARE_ID_NAMESPACE = uuid.UUID("6f0c8f5e-2b8e-5d55-9a43-7d1f0a6b3c21")
"""The name space of fakegpu's share IDs (UUID version 5 of ``<driver>/<pool>/<device>/<count>``)."""


class AllocationError(ValueError):
    """The claims cannot be allocated on the node; the text names the claim, the request and why."""


def claim_ref(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"ResourceClaim {meta.get('namespace', 'default')}/{meta.get('name', '')}"


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """core/v1 toleration matching (``ToleratesTaint``): key (empty with Exists matches every key),
    operator Equal (value) or Exists, effect (empty matches every effect)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        if (t.get("operator") or "Equal") == "Exists":
            return True
        if t.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _blocking_taint(device: Device, want: Want) -> bool:
    return any(
        t.get("effect") in BLOCKING_EFFECTS and not tolerates(want.tolerations, t)
        for t in device.spec.get("taints") or []
    )


def _quantity_text(value: Fraction) -> str:
    if value.denominator != 1:
        return f"{round(value * 1000)}m"
    number = int(value)
    return binary_quantity(number) if number >= 1024 and number % 1024 == 0 else decimal_quantity(number)


@dataclass
class _Pick:
    claim: int
    want: Want
    device: Device
    consumed: dict[str, Fraction]
    """The capacity one share consumes (a device with ``allowMultipleAllocations``); empty otherwise."""


@dataclass
class _Search:
    picks: list[_Pick] = field(default_factory=list)
    steps: int = 0


class Allocator:
    """Allocates claims on ``node`` from its ResourceSlices and the cluster's DeviceClasses, next to the
    already ``allocated`` claims (every claim of the cluster with a ``status.allocation``)."""

    def __init__(
        self,
        node: str,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        allocated: Iterable[Mapping[str, Any]] = (),
        *,
        node_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.node = node
        self.devices: NodeDevices = gather(slices, node, node_labels)
        self.classes = {str(c["metadata"]["name"]): c for c in classes}
        self.state: AllocatedState = allocated_state(allocated, self.devices.devices)
        self._matches: dict[tuple[str, tuple[str, ...]], LazyMatches] = {}
        self._variables: dict[DeviceId, Any] = {}
        """Each device's CEL ``device`` variable, built once."""

    # -- matching ------------------------------------------------------------------------------
    def _class(self, claim: Mapping[str, Any], want: Want) -> Mapping[str, Any]:
        found = self.classes.get(want.device_class)
        if found is None:
            raise AllocationError(
                f"{claim_ref(claim)}: request {want.name}: DeviceClass {want.device_class!r} does not exist"
            )
        return found

    def candidates(self, claim: Mapping[str, Any], want: Want) -> LazyMatches:
        """The node's devices matching the request's class and selectors, in first-fit order, tested as the
        search reaches them."""
        key = (want.device_class, want.selectors)
        if key not in self._matches:
            device_class = self._class(claim, want)
            class_selectors = [
                str(s["cel"].get("expression", ""))
                for s in (device_class.get("spec") or {}).get("selectors") or []
                if s.get("cel")
            ]
            self._compile(claim, want, class_selectors)
            self._matches[key] = LazyMatches(
                self.devices.devices, lambda d: self._selected(claim, want, d, class_selectors)
            )
        return self._matches[key]

    @staticmethod
    def _compile(claim: Mapping[str, Any], want: Want, class_selectors: list[str]) -> None:
        """Every selector compiles, else AllocationError naming it: a syntax error is not a device's."""
        for where, selectors in ((f"DeviceClass {want.device_class}", class_selectors), ("request", want.selectors)):
            for i, expression in enumerate(selectors):
                try:
                    compile_selector(expression)
                except CelCompileError as exc:
                    raise AllocationError(
                        f"{claim_ref(claim)}: request {want.name}: {where} selector #{i}: CEL compile error: {exc}"
                    ) from None

    def _selected(self, claim: Mapping[str, Any], want: Want, device: Device, class_selectors: list[str]) -> bool:
        variable = self._variables.get(device.id)
        if variable is None:
            variable = self._variables[device.id] = device_variable(device.id.driver, device.spec)
        for where, selectors in ((f"DeviceClass {want.device_class}", class_selectors), ("request", want.selectors)):
            for i, expression in enumerate(selectors):
                try:
                    if not selector_matches(expression, variable):
                        return False
                except CelError as exc:
                    raise AllocationError(
                        f"{claim_ref(claim)}: request {want.name}: {where} selector #{i}: CEL runtime error on "
                        f"device {device.id}: {exc}"
                    ) from None
        return True

    # -- availability --------------------------------------------------------------------------
    def _counters_fit(self, device: Device, picks: Sequence[_Pick]) -> bool:
        """Whether the shared counters ``device`` consumes are left; a device already allocated (a shared one
        taking another share) consumes nothing more."""
        wanted = device_counters(device)
        if not wanted or device.id in self.state.counted or any(p.device.id == device.id for p in picks):
            return True
        used: dict[CounterKey, Fraction] = dict(self.state.counters)
        for p in {p.device.id: p for p in picks if p.device.id not in self.state.counted}.values():
            for key, amount in device_counters(p.device).items():
                used[key] = used.get(key, Fraction(0)) + amount
        for key, amount in wanted.items():
            have = self.devices.counters.get(key)
            if have is None or used.get(key, Fraction(0)) + amount > have:
                return False
        return True

    def fit(self, want: Want, device: Device, picks: Sequence[_Pick]) -> dict[str, Fraction] | None:
        """None when ``device`` cannot serve ``want`` next to ``picks``; else what one share of it consumes
        (empty for a device taken whole)."""
        if _blocking_taint(device, want):
            return None
        if want.admin_access:
            return {}
        # Admin access does not allocate the device (it neither takes it nor its counters), as in the
        # scheduler: only picks without it count against a later request.
        picks = [p for p in picks if not p.want.admin_access]
        taken_whole = any(p.device.id == device.id and not p.device.allow_multiple for p in picks)
        if device.id in self.state.exclusive or taken_whole:
            return None
        if device.allow_multiple:
            if any(p.device.id == device.id and p.want == want for p in picks):
                return None
            already = dict(self.state.consumed.get(device.id, {}))
            for p in picks:
                if p.device.id == device.id and p.consumed:
                    for name, amount in p.consumed.items():
                        already[name] = already.get(name, Fraction(0)) + amount
            taken = consumed_capacity(device.spec, device.id.driver, want.capacity or {}, already)
            if taken is None or not self._counters_fit(device, picks):
                return None
            return taken
        if self.state.consumed.get(device.id) or any(p.device.id == device.id for p in picks):
            return None
        if want.capacity and not offers_at_least(device.spec, device.id.driver, want.capacity):
            return None
        return {} if self._counters_fit(device, picks) else None

    # -- constraints ---------------------------------------------------------------------------
    @staticmethod
    def _attribute(device: Device, name: str) -> Any:
        attributes = device.spec.get("attributes") or {}
        domain, _, ident = name.rpartition("/")
        for key in (name, ident if domain == device.id.driver else None):
            if key is not None and key in attributes:
                value = attributes[key]
                return next(iter(value.items())) if isinstance(value, Mapping) and value else value
        return None

    def _constraints_hold(self, claims: Sequence[Mapping[str, Any]], picks: Sequence[_Pick]) -> bool:
        """``matchAttribute``: the devices of the named requests (all when none) of one claim share the
        attribute's value, and each of them has it."""
        last = picks[-1]
        spec = (claims[last.claim].get("spec") or {}).get("devices") or {}
        for constraint in spec.get("constraints") or []:
            attribute = constraint.get("matchAttribute")
            if not attribute:
                continue
            names = set(constraint.get("requests") or [])

            def applies(want: Want, names: set[str] = names) -> bool:
                return not names or want.name in names or want.name.split("/", 1)[0] in names

            if not applies(last.want):
                continue
            value = self._attribute(last.device, attribute)
            if value is None:
                return False
            for p in picks[:-1]:
                if p.claim == last.claim and applies(p.want) and self._attribute(p.device, attribute) != value:
                    return False
        return True

    # -- search --------------------------------------------------------------------------------
    def _solve(
        self, claims: Sequence[Mapping[str, Any]], slots: Sequence[tuple[int, Request]], at: int, search: _Search
    ) -> bool:
        if at == len(slots):
            return True
        index, request = slots[at]
        for want in request.alternatives:
            devices = self.candidates(claims[index], want)
            if want.all_devices:
                self._check_pools_complete(claims[index], want)
                if self._take_all(claims, slots, at, search, want, devices.all()):
                    return True
            elif self._choose(claims, slots, at, search, want, devices, want.count, 0):
                return True
        return False

    def _check_pools_complete(self, claim: Mapping[str, Any], want: Want) -> None:
        """``All`` needs every device of the pools: a pool missing slices (being updated) fails the claim,
        as in the scheduler (``asks for all devices, but resource pool ... is currently being updated``)."""
        for pool in self.devices.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"{claim_ref(claim)}: request {want.name}: asks for all devices, but resource pool "
                    f"{pool.driver}/{pool.name} is currently being updated"
                )

    def _take_all(
        self,
        claims: Sequence[Mapping[str, Any]],
        slots: Sequence[tuple[int, Request]],
        at: int,
        search: _Search,
        want: Want,
        devices: list[Device],
    ) -> bool:
        mark = len(search.picks)
        for device in devices:
            taken = self.fit(want, device, search.picks)
            if taken is None:
                break
            search.picks.append(_Pick(slots[at][0], want, device, taken))
            if not self._constraints_hold(claims, search.picks):
                break
        else:
            if devices and self._solve(claims, slots, at + 1, search):
                return True
        del search.picks[mark:]
        return False

    def _choose(
        self,
        claims: Sequence[Mapping[str, Any]],
        slots: Sequence[tuple[int, Request]],
        at: int,
        search: _Search,
        want: Want,
        devices: LazyMatches,
        need: int,
        start: int,
    ) -> bool:
        if need == 0:
            return self._solve(claims, slots, at + 1, search)
        i = start - 1
        while (device := devices.at(i := i + 1)) is not None:
            search.steps += 1
            if search.steps > MAX_STEPS:
                raise AllocationError(self._gave_up(claims[slots[at][0]], want))
            taken = self.fit(want, device, search.picks)
            if taken is None:
                continue
            search.picks.append(_Pick(slots[at][0], want, device, taken))
            if self._constraints_hold(claims, search.picks) and self._choose(
                claims, slots, at, search, want, devices, need - 1, i + 1
            ):
                return True
            search.picks.pop()
        return False

    def _gave_up(self, claim: Mapping[str, Any], want: Want) -> str:
        """Why the search stopped: the request it was filling and the constraints that kept it backtracking."""
        constraints = [
            f"matchAttribute {c['matchAttribute']}"
            + (f" of requests {', '.join(c['requests'])}" if c.get("requests") else "")
            for c in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
            if c.get("matchAttribute")
        ]
        why = "; ".join(constraints) if constraints else "no constraints"
        return (
            f"{claim_ref(claim)}: request {want.name}: gave up after trying {MAX_STEPS} devices on node {self.node} "
            f"while searching for devices that satisfy {why}"
        )

    # -- the allocation ------------------------------------------------------------------------
    def allocate(self, claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The ``status.allocation`` of each claim (in order), allocated together as for one pod; the
        node's state then counts them, so a next call allocates beside them. AllocationError if they
        cannot all be allocated."""
        slots: list[tuple[int, Request]] = []
        for index, claim in enumerate(claims):
            try:
                slots.extend((index, r) for r in claim_requests(claim))
            except ValueError as exc:
                raise AllocationError(f"{claim_ref(claim)}: {exc}") from None
            for constraint in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []:
                if constraint.get("distinctAttribute"):
                    raise AllocationError(f"{claim_ref(claim)}: distinctAttribute constraints are not supported")
        search = _Search()
        if not self._solve(claims, slots, 0, search):
            raise AllocationError(self._explain(claims, slots))
        allocations = [self._allocation(claim, index, search.picks) for index, claim in enumerate(claims)]
        self._commit(search.picks)
        return allocations

    def _share_id(self, device: DeviceId) -> str:
        """A new share's ID: a UUID as the scheduler's (``uuid.NewUUID``), but derived from the device and a
        count, so a run is reproducible; never one the device's shares already use."""
        used = self.state.share_ids.setdefault(device, set())
        n = 0
        while (share := str(uuid.uuid5(SHARE_ID_NAMESPACE, f"{device}/{n}"))) in used:
            n += 1
        used.add(share)
        return share

    def _commit(self, picks: Sequence[_Pick]) -> None:
        for p in picks:
            if p.want.admin_access:
                continue
            if p.device.allow_multiple:
                used = self.state.consumed.setdefault(p.device.id, {})
                for name, amount in p.consumed.items():
                    used[name] = used.get(name, Fraction(0)) + amount
            else:
                self.state.exclusive.add(p.device.id)
            self.state.count(p.device)

    def _result(self, pick: _Pick) -> dict[str, Any]:
        did = pick.device.id
        result: dict[str, Any] = {"request": pick.want.name, "driver": did.driver, "pool": did.pool}
        result["device"] = did.device
        if pick.want.admin_access:
            result["adminAccess"] = True
        if pick.want.tolerations:
            result["tolerations"] = [dict(t) for t in pick.want.tolerations]
        if pick.device.allow_multiple:
            result["shareID"] = self._share_id(did)
            if pick.consumed:
                result["consumedCapacity"] = {n: _quantity_text(v) for n, v in pick.consumed.items()}
        return result

    def _allocation(self, claim: Mapping[str, Any], index: int, picks: Sequence[_Pick]) -> dict[str, Any]:
        mine = [p for p in picks if p.claim == index]
        config: list[dict[str, Any]] = []
        for want in dict.fromkeys(p.want for p in mine):
            for entry in (self.classes[want.device_class].get("spec") or {}).get("config") or []:
                config.append({"source": "FromClass", "requests": [want.name], **_config_body(entry)})
        for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            requests = {"requests": list(entry["requests"])} if entry.get("requests") else {}
            config.append({"source": "FromClaim", **requests, **_config_body(entry)})
        devices: dict[str, Any] = {"results": [self._result(p) for p in mine]}
        if config:
            devices["config"] = config
        allocation: dict[str, Any] = {"devices": devices}
        if any(p.device.node_local for p in mine):
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.node]}]}
            allocation["nodeSelector"] = {"nodeSelectorTerms": [term]}
        return allocation

    # -- why not -------------------------------------------------------------------------------
    def _explain(self, claims: Sequence[Mapping[str, Any]], slots: Sequence[tuple[int, Request]]) -> str:
        """The first request that cannot be met even alone, with the reasons per device; else that the
        requests cannot be met together."""
        for index, request in slots:
            reasons = [self._why(claims[index], want) for want in request.alternatives]
            if all(r is not None for r in reasons):
                text = "; ".join(r for r in reasons if r)
                where = f"{claim_ref(claims[index])}: request {request.name}"
                return f"{where}: cannot allocate on node {self.node}: {text}"
        names = ", ".join(claim_ref(c) for c in claims)
        return (
            f"{names}: cannot allocate all requests together on node {self.node}: each could be met alone, but "
            "not all at once (matchAttribute constraints, or requests competing for the same devices)"
        )

    def _why(self, claim: Mapping[str, Any], want: Want) -> str | None:
        """None if ``want`` could be met alone; else why not."""
        devices = self.candidates(claim, want).all()
        counts = {"tainted": 0, "in use": 0, "capacity left too small": 0}
        free = 0
        for d in devices:
            if self.fit(want, d, []) is not None:
                free += 1
            elif _blocking_taint(d, want):
                counts["tainted"] += 1
            elif d.allow_multiple or want.capacity:
                counts["capacity left too small"] += 1
            else:
                counts["in use"] += 1
        need = "all" if want.all_devices else str(want.count)
        enough = free >= want.count and (not want.all_devices or (devices and free == len(devices)))
        if enough:
            return None
        what = f"DeviceClass {want.device_class}" + (" and the request's selectors" if want.selectors else "")
        detail = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        return f"{what} match {len(devices)} device(s), {free} free{f' ({detail})' if detail else ''}, need {need}"


def _config_body(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("requests", "source")}
