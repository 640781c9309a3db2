"""Standalone deployment: a compiled model as a relocatable artifact directory.

``CompiledModel.save(path)`` writes it (``artifact``); ``braze.load(path)`` loads it with
numpy alone (``load``); C programs use ``braze_model.h`` in the directory. docs/deployment.md.
"""
