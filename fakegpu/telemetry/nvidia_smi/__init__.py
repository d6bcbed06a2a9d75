"""A fake ``nvidia-smi``: the classic table, ``-L``, ``--query-gpu``, ``-q``, ``topo -m`` and ``mig
-lgip``/``-lgi``/``-lci`` for fake GPUs.

Pure rendering (stdlib only): ``devices`` describes a node's GPUs (and, for the DRA driver's dynamic MIG,
the MIG devices it may create) and resolves FAKEGPU_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES,
``table``/``list``/``query``/``query_full``/``topology``/``mig_tables`` pre-render text fragments with
the placeholders of ``tokens`` (``nvlinks`` holds the NVLink count per board ``topo -m`` shows), ``command``
parses nvidia-smi's arguments and assembles the output, and ``shell_script`` packs the same fragments into a
POSIX sh + awk script that runs in containers without Python; ``injection`` says where the script lives on
the host and where containers see it.
"""
