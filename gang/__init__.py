"""Gang scheduling: placing all pods of a multi-pod ScavengerJob at once."""

from gang.placement import fit_gang, place_identical

__all__ = ["fit_gang", "place_identical"]
