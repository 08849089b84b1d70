"""The recipe site: static HTML pages and the agent JSON API, generated from the catalog.

`build_site(out_dir)` writes index.html, one page per recipe, the bench plots and the export's
api/v1/ documents beside them; `SiteServer` previews a built site on loopback.
"""
