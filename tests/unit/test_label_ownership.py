"""fakegpu removes only the node labels it wrote, and patches nothing when the node is in sync."""

from __future__ import annotations

from sharing.label_ownership import OWNED_LABELS_ANNOTATION, label_patch, owned_keys


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


def test_a_label_someone_else_deleted_is_not_deleted_again():
    patch = label_patch({}, {OWNED_LABELS_ANNOTATION: "a,b"}, {"a": "1"})
    assert patch == {"metadata": {"labels": {"a": "1"}, "annotations": {OWNED_LABELS_ANNOTATION: "a"}}}


def test_owning_nothing_drops_the_annotation():
    patch = label_patch({"a": "1"}, {OWNED_LABELS_ANNOTATION: "a"}, {})
    assert patch == {"metadata": {"labels": {"a": None}, "annotations": {OWNED_LABELS_ANNOTATION: None}}}
    assert owned_keys({OWNED_LABELS_ANNOTATION: " a, ,b"}) == {"a", "b"}
