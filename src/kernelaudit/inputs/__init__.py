"""Inputs of a case: value distributions, index and mask draws, sizes, layouts, materialisation."""
