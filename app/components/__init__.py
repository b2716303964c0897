"""Helpers shared by the dashboard's views: palette, number formats, filters, cached data access."""
