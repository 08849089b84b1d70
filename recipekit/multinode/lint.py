"""Lint of a recipe's multi-node layouts: the layout rules, every node's constraints, flag names."""

from __future__ import annotations

from typing import Any

from recipekit.constraints import check
from recipekit.errors import ErrorList, RecipekitError
from recipekit.multinode import rules
from recipekit.multinode.k8s import k8s_name, name_collision
from recipekit.multinode.nodes import all_nodes
from recipekit.multinode.typed import check_nodes_values


def lint_multinode(loaded: Any, catalog: Any = None) -> list[RecipekitError]:
    """One error per problem of each multi-node layout (rule ids as error codes)."""
    r = loaded.recipe
    errs: list[RecipekitError] = []
    for name, spec in r.multinode.items():
        where = loaded.where(f"$.multinode.{name}")
        errs += [v.error(where) for v in rules.check_layout(r, name, spec)]
        other = name_collision(r, name)
        if other is not None and spec.k8s is not None:
            errs.append(
                RecipekitError(
                    code="k8s-name-collision",
                    location=where,
                    message=f"layouts {name!r} and {other!r} fold to the same Kubernetes name {k8s_name(f'{r.id}-{name}')!r}",
                    hint="rename one of the multi-node layouts (lowercase letters, digits and '-')",
                )
            )
        try:
            nodes = all_nodes(loaded, name, environ={})
        except RecipekitError as e:
            errs += e.errors if isinstance(e, ErrorList) else [e]
            continue
        errs += [v.error(where) for v in rules.check_nodes(nodes)]
        errs += check_nodes_values(nodes)
        for n in nodes:
            errs += [v.error(f"{where} node {n.role.rank}") for v in check(n.eff)]
            if catalog is not None and hasattr(catalog, "flag_problem"):
                for a in n.eff.args:
                    prob = catalog.flag_problem(a.flag)
                    if prob:
                        errs.append(
                            RecipekitError(
                                code=prob[0],
                                location=f"{where} node {n.role.rank}",
                                message=prob[1] + f" ({r.engine.flag_catalog})",
                                hint=prob[2],
                            )
                        )
    return errs
