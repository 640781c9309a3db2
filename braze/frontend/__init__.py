"""Frontends: ONNX models and torch.export programs into braze's graph IR."""
