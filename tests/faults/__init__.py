"""The fault table: every command's bad inputs, damaged files and refused outputs as rows
(table.py), run on one micro world (world.py) and judged by a few outcomes (outcomes.py); pytest
runs it as tests/faults/test_table.py, scripts/fault_sweep.py as a Markdown table."""
