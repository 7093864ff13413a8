"""Multi-step recipes (train -> probe -> plot). Only commands/ and analyses/ import them."""
