"""Typed values of a multi-node layout: addresses, ports, HTTP paths, pipeline partitions.

Every value a multi-node render writes into a config that another program parses (HAProxy,
vLLM's --master-addr / VLLM_HOST_IP, a Kubernetes manifest) is checked against the grammar
that program expects, so that no value can carry a second directive (a newline, a `#`, a
space). The grammars, with their sources:
  address    an IPv4 or IPv6 address (RFC 791 / RFC 4291, as Python's `ipaddress` parses them)
             or a host name (RFC 1123 §2.1: dot-separated labels of letters, digits and '-',
             1..63 characters each, not starting or ending with '-', 253 characters at most);
             or a placeholder the recipe declares (`<head-rig-address>`), to be filled in.
  port       an integer 1..65535 (a TCP port; 0 asks the kernel for any port).
  http path  '/' then RFC 3986 path characters (pchar: unreserved, pct-encoded, sub-delims,
             ':' '@'), an optional '?query' of the same characters plus '/' and '?'.
  partition  VLLM_PP_LAYER_PARTITION: comma-separated positive integers, no spaces (vLLM
             `distributed/utils.py get_pp_indices` splits on ',' and calls int() on each part;
             a zero-layer stage or an empty part is not a pipeline stage).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

PLACEHOLDER = re.compile(r"<[a-z0-9][a-z0-9-]*>")
LWS_VARIABLE = re.compile(r"\$\((LWS_LEADER_ADDRESS|POD_IP)\)")  # kubelet-expanded (recipekit.multinode.forms)
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PCHAR = r"A-Za-z0-9\-._~!$&'()*+,;=:@"
_HTTP_PATH = re.compile(rf"/(?:[{_PCHAR}/]|%[0-9A-Fa-f]{{2}})*(?:\?(?:[{_PCHAR}/?]|%[0-9A-Fa-f]{{2}})*)?")
PARTITION = re.compile(r"[1-9][0-9]*(,[1-9][0-9]*)*")
WILDCARDS = ("0.0.0.0", "::", "[::]")


def is_placeholder(text: str) -> bool:
    return PLACEHOLDER.fullmatch(text) is not None


def address_problem(value: Any, *, lws: bool = False, wildcard: bool = False) -> str | None:
    """Why `value` is not an address (None when it is one)."""
    text = str(value)
    if is_placeholder(text) or (lws and LWS_VARIABLE.fullmatch(text)):
        return None
    if wildcard and text in WILDCARDS:
        return None
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare)
        return None
    except ValueError:
        pass
    if bare is not text:
        return f"{text!r} is not an IPv6 address in brackets"
    if len(text) > 253 or not text or not all(_LABEL.fullmatch(p) for p in text.split(".")):
        return f"{text!r} is neither an IPv4/IPv6 address nor an RFC 1123 host name"
    if re.fullmatch(r"[0-9.]+", text):
        return f"{text!r} is not a valid IPv4 address"
    return None


def port_problem(value: Any) -> str | None:
    """Why `value` is not a TCP port 1..65535 (None when it is one)."""
    text = str(value)
    if is_placeholder(text):
        return None
    if not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= 65535:
        return f"{text!r} is not a port 1..65535"
    return None


def http_path_problem(value: Any) -> str | None:
    text = str(value)
    if _HTTP_PATH.fullmatch(text) is None:
        return f"{text!r} is not an HTTP path ('/' then RFC 3986 path characters)"
    return None


def partition_problem(value: Any) -> str | None:
    text = str(value)
    if PARTITION.fullmatch(text) is None:
        return f"{text!r} is not comma-separated positive layer counts (e.g. '20,20')"
    return None


def host_port(address: str) -> tuple[str, str]:
    """('host', 'port') of 'host:port' or '[v6]:port' (the port is what follows the last ':')."""
    host, _, port = address.rpartition(":")
    return host, port
