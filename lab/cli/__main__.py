"""`python -m lab.cli` (torchrun and deepspeed start a run's ranks this way): the `lab` command."""
from lab.cli import main

main()
