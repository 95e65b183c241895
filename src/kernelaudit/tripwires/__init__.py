"""Static tripwires: constructs in a candidate's source (and the local modules and CUDA sources
it uses) that can game a benchmark, each reported as a warning with its file and line."""

from kernelaudit.tripwires.rules import RULES, Rule, Tripwire
from kernelaudit.tripwires.scan import Scanned, scan, scan_candidate

__all__ = ["RULES", "Rule", "Scanned", "Tripwire", "scan", "scan_candidate"]
