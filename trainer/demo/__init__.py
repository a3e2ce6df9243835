"""The demonstration trainer: a small ResNet trained on CIFAR-10 through the same capture stack a user's loop gets."""
