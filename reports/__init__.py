"""Renderers of the honest-CI report (Markdown, JSON; HTML later) from one immutable audit result."""
