"""Output: the web view on the admin port (``/ui/``) and what ``otel-eval show`` shares with
it: a stored run regrouped as a tree of steps (``run``), values made readable and bounded
(``text``), the pages as escaped HTML (``pages``, ``html``), and the routes (``routes``).

    store (per-trace v1 objects, issues) -> run.tree -> pages.* -> routes.PAGES -> admin
"""
