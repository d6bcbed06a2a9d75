"""fakegpu removes only the node labels it wrote, and patches nothing when the node is in sync."""

from __future__ import annotations

from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION, label_patch, owned_keys


def test_first_labelling_sets_labels_and_records_them():
    patch = label_patch(
        {"kubernetes.io/os": "linux"}, None, {"nvidia.com/gpu.count": "2", "nvidia.com/mig.capable": "true"}
    )
    assert patch == {
        "metadata": {
            "labels": {"nvidia.com/gpu.count": "2", "nvidia.com/mig.capable": "true"},
            "annotations": {OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count,nvidia.com/mig.capable"},
        }
    }


def test_in_sync_node_needs_no_patch():
    wanted = {"nvidia.com/gpu.count": "2"}
    assert label_patch(dict(wanted), {OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count"}, wanted) is None
    assert label_patch({}, {}, {}) is None


def test_labels_that_stop_applying_are_removed_but_foreign_ones_stay():
    labels = {
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.product": "from-someone-else",
        "team": "ml",
    }
    annotations = {
        OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count,nvidia.com/gpu.replicas,nvidia.com/gpu.sharing-strategy"
    }
    wanted = {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "1"}
    patch = label_patch(labels, annotations, wanted)
    assert patch == {
        "metadata": {
            "labels": {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": None},
            "annotations": {OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count,nvidia.com/gpu.replicas"},
        }
    }


def test_owned_labels_no_longer_wanted_are_nulled_even_if_this_view_lacks_them():
    # The view may be stale; nulling a missing key is a no-op for a merge patch, forgetting it is a leak.
    patch = label_patch({}, {OWNED_LABELS_ANNOTATION: "a,b"}, {"a": "1"})
    assert patch == {"metadata": {"labels": {"a": "1", "b": None}, "annotations": {OWNED_LABELS_ANNOTATION: "a"}}}


def test_a_label_another_writer_set_to_the_same_value_is_never_claimed():
    # Real GFD or an admin set mig.strategy already: fakegpu agrees with it but must not delete it later.
    patch = label_patch({"nvidia.com/mig.strategy": "mixed"}, None, {"nvidia.com/mig.strategy": "mixed", "x": "1"})
    assert patch == {"metadata": {"labels": {"x": "1"}, "annotations": {OWNED_LABELS_ANNOTATION: "x"}}}
    later = label_patch({"nvidia.com/mig.strategy": "mixed", "x": "1"}, {OWNED_LABELS_ANNOTATION: "x"}, {"x": "1"})
    assert later is None


def test_owning_nothing_drops_the_annotation():
    patch = label_patch({"a": "1"}, {OWNED_LABELS_ANNOTATION: "a"}, {})
    assert patch == {"metadata": {"labels": {"a": None}, "annotations": {OWNED_LABELS_ANNOTATION: None}}}
    assert owned_keys({OWNED_LABELS_ANNOTATION: " a, ,b"}) == {"a", "b"}
