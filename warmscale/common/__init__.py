"""What several layers share and that belongs to none of them: the bounded HTTP listener the scaler's
and the controller's ports serve through. Imports nothing of warmscale's layers (pyproject's
import-linter layers contract puts it at the bottom)."""
