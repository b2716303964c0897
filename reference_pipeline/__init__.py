"""The reference inference pipeline: a real, traced service plus load and planted-cause scenarios."""
