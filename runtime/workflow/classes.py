"""``cls(Trainer, *args).to(compute)``: one instance of a class per rank, kept between calls.

::

    trainer = cls(Trainer, lr=0.1).to(compute)   # Trainer(lr=0.1) made in every rank's process
    trainer.step(batch=32)                       # Trainer.step on every rank; results in rank order
    trainer.step.options(timeout=60)(batch=32)   # call options, as for fn()
    trainer.teardown()

The instances live in the job's long-lived worker processes (``runtime.agent.service.instances``),
so what a method stores on ``self`` is there at the next call. After new code reaches the job, an
instance whose class's source did not change keeps its state (its methods run the new module's
code); one whose class changed is made again from the constructor's arguments, and the process says
so in the output shown here. A process that is replaced (it died, or did not stop after a cancel)
makes its instance again and says so too.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any, Optional

from runtime.agent import contract
from runtime.workflow.codesync import Snapshot, Source
from runtime.workflow.compute import Compute, DeployRequest
from runtime.workflow.functions import CallOptions, Deployed, _Connection, check_arguments, imported_digest
from runtime.workflow.locate import locate


class cls:  # lower case like Kubetorch's ``kt.cls``
    """A class to make one instance of per rank, with its constructor's arguments.

    Args:
        klass: a class defined at the top level of a module in a ``.py`` file.
        *args: the constructor's positional arguments (JSON values, or picklable with ``pickle``).
        **kwargs: its keyword arguments.

    Raises:
        ValueError: ``klass`` is not a class, or cannot be imported by name in another process.
        TypeError: the arguments do not fit the constructor's signature.
    """

    def __init__(self, klass: type, *args: Any, **kwargs: Any) -> None:
        if not inspect.isclass(klass):
            raise ValueError(f"cls({klass!r}) needs a class; for a function use fn()")
        self.klass = klass
        self.name, self.root = locate(klass)
        self.imported = imported_digest(self.root)
        check_arguments(klass.__init__, self.name, args, kwargs, bound=True)
        self.args = args
        self.kwargs = kwargs

    def to(self, compute: Compute) -> RemoteInstance:
        """Deploy to ``compute`` (start its job, or reuse it) and make the instance on every rank.

        Raises:
            RemoteError: the constructor raised on a rank.
            NestedJobError, RendezvousError, DeployError, ...: as :meth:`runtime.workflow.fn.to`.
        """
        compute.deploy(self.request)
        instance = RemoteInstance(self, compute)
        instance._arrived()
        return instance

    @property
    def request(self) -> DeployRequest:
        """What deploying this class asks of a compute: its name."""
        return DeployRequest(self.name)


class RemoteInstance(Deployed):
    """One instance of a class per rank of a job; its public methods are called on every rank.

    ``instance.method(*args, **kwargs)`` returns one result per rank, in global rank order (as a
    remote function does); ``instance.method.options(...)`` and ``instance.options(...)`` set call options.

    Args:
        target: the class and its constructor's arguments.
        compute: where it is deployed.
        options: how calls run (default: :class:`CallOptions`' defaults).
        connection: the connection to share (a view's), or ``None`` for a new one.
        instance_id: the instance's id on every rank (a view or a moved instance keeps it).
    """

    def __init__(self, target: cls, compute: Compute, *, options: Optional[CallOptions] = None,
                 connection: Optional[_Connection] = None, instance_id: Optional[str] = None) -> None:
        super().__init__(target, compute, options or CallOptions(), connection)
        self.instance_id = instance_id or uuid.uuid4().hex

    def __getattr__(self, name: str) -> RemoteMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        attribute = getattr(self.target.klass, name, None)
        if not callable(attribute) and not self._edited(self._code()[1]):
            raise AttributeError(f"{self.target.name} has no method {name!r}")
        return RemoteMethod(self, name)

    def _view(self, compute: Compute, options: CallOptions, connection: Optional[_Connection]) -> RemoteInstance:
        return RemoteInstance(self.target, compute, options=options, connection=connection,
                              instance_id=self.instance_id)

    def _arrived(self) -> None:
        self._call(None, (), {})

    def _call(self, method: Optional[str], args: tuple[Any, ...], kwargs: dict[str, Any],
              code: Optional[tuple[Optional[Source], Optional[Snapshot]]] = None) -> list[Any]:
        target = self.target
        return self._invoke(contract.INSTANCE_CALL, [target.name, self.instance_id, list(target.args),
                                                     dict(target.kwargs), method, list(args), kwargs], {}, code)


class RemoteMethod:
    """A public method of a :class:`RemoteInstance`: calling it calls the method on every rank."""

    def __init__(self, instance: RemoteInstance, name: str) -> None:
        self.instance = instance
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Call the method on every rank (or the nodes of ``node_ranks``); one result per rank, in rank order.

        Raises:
            TypeError: the arguments do not fit the method's signature (checked before anything runs,
                while the source tree is as the class was imported from; after an edit the job,
                which runs the edited code, checks them: a RemoteError).
            RemoteError, CallTimeout, WorkerMembershipChanged, ...: as a remote function's call.
        """
        target = self.instance.target
        code = self.instance._code()
        if not self.instance._edited(code[1]):
            check_arguments(getattr(target.klass, self.name), f"{target.name}.{self.name}", args, kwargs,
                            bound=not isinstance(inspect.getattr_static(target.klass, self.name),
                                                 (staticmethod, classmethod)))
        return self.instance._call(self.name, args, kwargs, code)

    def options(self, **options: Any) -> RemoteMethod:
        """This method with other call options (:meth:`RemoteInstance.options`)."""
        return RemoteMethod(self.instance.options(**options), self.name)
