"""``POST /code``: a tree reaches every node of the job down the one tree, and a node that lacks one
fetches it. Standard library only.

Bodies (JSON; the archive is base64, so it is never unpickled, and the job's token guards the
route like every other)::

    client -> coordinator   {"digest": D, "archive": "<base64>"}
    node -> child           {"digest": D, "archive": "<base64>", "nodes": [4, 5, 6, 7], "fanout": 50}
        each node unpacks the tree (checking its digest), sends it on to its children (the same
        subtrees a call to every node takes, ``rendezvous.tree``) and answers once they all have it:
        200 -> {"digest": D, "nodes": <nodes that hold it now>}
    node -> coordinator     {"fetch": D}   (a node that joined after the tree was sent)
        200 -> {"digest": D, "archive": "<base64>"};   404 when the coordinator does not hold it

A call names the tree it needs by digest (``"code": D``); the coordinator answers 409 with
``{"code_missing": D}`` when it does not hold it, and the caller sends it, then calls again, so
unchanged code costs only the digest in the call.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from typing import Any, Callable, Mapping, Optional

from runtime.agent import contract
from runtime.agent.code.store import CodeStore
from runtime.agent.errors import HttpError
from runtime.agent.net.peer import Answer, Exchange, PeerTransport
from runtime.agent.net.transport import encode
from runtime.agent.rendezvous.tree import plan_node, plan_root
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.archive import ArchiveError, check_digest
from runtime.agent.spec.status import RUNNING
from runtime.agent.world import World

SEND_TIMEOUT = 60.0
"""Seconds a subtree may take to receive and unpack a tree."""
FETCH_TIMEOUT = 30.0
"""Seconds a node may take to fetch a tree from the coordinator."""


class CodeFanout:
    """A node's part in code sync: its store, ``POST /code``, and fetching a tree it lacks.

    Args:
        settings: the agent's settings (node id, tree width and threshold).
        world: returns the agent's current world.
        store: the node's trees.
        transport: how this node reaches others.
        clock: monotonic clock, seconds.
    """

    def __init__(self, settings: AgentSettings, *, world: Callable[[], Optional[World]], store: CodeStore,
                 transport: PeerTransport, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._world = world
        self.store = store
        self._transport = transport
        self._clock = clock
        self._fetching = threading.Lock()

    def route(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /code`` (module docstring).

        Raises:
            HttpError: 400 for a bad body or an unsafe archive, 404 for a tree this node does not
                hold, 503 without a running world, 502 when a node below did not take the tree.
        """
        if "fetch" in body:
            digest = _digest(body["fetch"])
            archive = self.store.archive(digest)
            if archive is None:
                raise HttpError(404, f"this node does not hold tree {digest}")
            return {"digest": digest, "archive": base64.b64encode(archive).decode("ascii")}
        digest = _digest(body.get("digest"))
        encoded = body.get("archive")
        if not isinstance(encoded, str):
            raise HttpError(400, "archive must be the base64 of a gzipped tar")
        try:
            archive = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise HttpError(400, "archive must be the base64 of a gzipped tar") from None
        world = self._world()
        me_id = self._settings.node.node_id
        if world is None or world.status != RUNNING or not world.has(me_id):
            raise HttpError(503, "the job has no running world yet (still forming, or finished); retry shortly")
        me = world.node_rank_of(me_id)
        nodes, fanout = body.get("nodes"), self._settings.spec.tree_fanout
        if nodes is None:
            if me != 0:
                raise HttpError(409, "code goes to the coordinator (node rank 0)")
            s = self._settings.spec
            plan = plan_root(range(len(world.nodes)), me, threshold=s.tree_threshold, width=fanout)
        else:
            if (not isinstance(nodes, list) or not nodes or nodes[0] != me
                    or not all(isinstance(n, int) and 0 <= n < len(world.nodes) for n in nodes)):
                raise HttpError(400, f"nodes={nodes!r} is invalid here: a list of node ranks starting with this "
                                     f"node's ({me})")
            fanout = body.get("fanout", fanout)
            if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < 1:
                raise HttpError(400, f"fanout={fanout!r} is invalid: use 1 or more")
            plan = plan_node(nodes, fanout)
        try:
            self.store.add(digest, archive)
        except ArchiveError as exc:
            raise HttpError(400, f"tree {digest} refused: {exc}") from None
        held = 1 + self._send(world, digest, encoded, plan.subtrees, fanout)
        return {"digest": digest, "nodes": held}

    def tree_for(self, digest: str, world: World) -> str:
        """The directory of tree ``digest``, fetched from the coordinator if this node lacks it.

        Raises:
            HttpError: 502 when it cannot be had.
        """
        held = self.store.tree(digest)
        if held is not None:
            return held
        with self._fetching:
            held = self.store.tree(digest)
            if held is not None:
                return held
            head = world.nodes[0]
            exchange = Exchange(head.addr, head.port, "POST", contract.ROUTE_CODE, encode({"fetch": digest}))
            answer = self._transport.exchange(exchange, FETCH_TIMEOUT)
            if not answer.ok or not isinstance(answer.body.get("archive"), str):
                raise HttpError(502, f"node {self._settings.node.node_id} lacks tree {digest} and could not fetch it "
                                     f"from the coordinator: {answer.problem if not answer.ok else 'no archive'}")
            try:
                return self.store.add(digest, base64.b64decode(answer.body["archive"], validate=True))
            except (ArchiveError, binascii.Error, ValueError) as exc:
                raise HttpError(502, f"tree {digest} from the coordinator was refused: {exc}") from None

    def _send(self, world: World, digest: str, encoded: str, subtrees: tuple[tuple[int, ...], ...],
              fanout: int) -> int:
        """Send the tree to one child per subtree; how many nodes below now hold it.

        Raises:
            HttpError: 502 naming the first child whose subtree did not take it.
        """
        if not subtrees:
            return 0
        head = json.dumps({"digest": digest, "archive": encoded, "fanout": fanout})
        children = [world.nodes[sub[0]] for sub in subtrees]
        exchanges = [Exchange(child.addr, child.port, "POST", contract.ROUTE_CODE,
                              f'{head[:-1]}, "nodes": {json.dumps(list(sub))}}}'.encode())
                     for child, sub in zip(children, subtrees)]
        answers: list[Answer] = []
        self._transport.batch(exchanges, self._clock() + SEND_TIMEOUT).run(answers.append)
        failed = sorted((a for a in answers if not a.ok), key=lambda a: a.index)
        if failed or len(answers) < len(exchanges):
            answer = failed[0] if failed else None
            index = answer.index if answer is not None else len(answers)
            child = children[index]
            problem = answer.problem if answer is not None else "no answer"
            raise HttpError(502, f"node rank {subtrees[index][0]} ({child.addr}:{child.port}) did not take tree "
                                 f"{digest}: {problem}")
        return sum(int(a.body.get("nodes", 0)) for a in answers)


def _digest(value: Any) -> str:
    try:
        return check_digest(value)
    except ArchiveError as exc:
        raise HttpError(400, str(exc)) from None
