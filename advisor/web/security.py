"""Who may read and who may act.

Actions (anything that changes something: a diagnosis run, an experiment) need the API token as
`Authorization: Bearer ...`, compared in constant time. A browser never attaches that header to a
cross-site form post or navigation, so those are refused by construction; requests that say they
come from another site (Sec-Fetch-Site, Origin) are refused as well. Without a configured token,
actions are disabled and say so. Read pages need the token too when the server listens beyond
loopback (the header, or the cookie /login sets).
"""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request

from advisor.web.context import Ctx

COOKIE = "advisor_token"


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _same_origin(request: Request) -> bool:
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:  # not sent by browsers on same-origin GETs, nor by scripts (curl)
        return True
    # "null" (a sandboxed or file:// page) has no netloc, so it never matches.
    return urlsplit(origin).netloc == request.headers.get("host", "")


def require_action(request: Request, ctx: Ctx) -> None:
    if ctx.token is None:
        raise HTTPException(403, "actions are disabled: start advisor serve with ADVISOR_API_TOKEN set")
    if not _same_origin(request):
        raise HTTPException(403, "refused: a cross-site request")
    given = _presented(request)
    if given is None:
        raise HTTPException(401, "this action needs the API token: Authorization: Bearer <ADVISOR_API_TOKEN>",
                            headers={"WWW-Authenticate": "Bearer"})
    if not _matches(given, ctx.token):
        raise HTTPException(403, "wrong API token")


def require_read(request: Request, ctx: Ctx) -> None:
    if ctx.loopback:
        return
    if ctx.token is not None and (_matches(_presented(request), ctx.token)
                                  or _matches(request.cookies.get(COOKIE), ctx.token)):
        return
    raise HTTPException(401, "this server listens beyond loopback: pages need the API token (log in at /login)",
                        headers={"WWW-Authenticate": "Bearer"})


Actor = Annotated[None, Depends(require_action)]
Reader = Annotated[None, Depends(require_read)]
