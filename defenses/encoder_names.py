"""The encoders the self-supervised defenses accept by name (:func:`defenses.encoders.build_encoder`
builds them): here, without torch, so that an SSL defense checks its parameters, and the attack
phase names it, without importing torch."""

ENCODER_KINDS = ("resnet18", "cnn", "mlp", "scatter-conv")
#: encoders on the fixed scattering maps (defenses/scatter_ssl.py): RGB 32 x 32 images, feature-space views
MAP_ENCODERS = ("scatter-conv",)
