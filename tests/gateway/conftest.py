# The scaler's in-process server and KEDA-like clients, used by name in this package's tests.
from tests.scaler.conftest import clients, make_server  # noqa: F401
