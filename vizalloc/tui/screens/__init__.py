"""One module per screen; ``base.py`` holds what they share."""
