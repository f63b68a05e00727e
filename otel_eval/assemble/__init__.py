"""Stage: assemble. Spans grouped per trace and released when finished (``assembler``),
the engine that owns admission, durability and hand-off (``engine``), and the spool."""
