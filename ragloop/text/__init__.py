"""Text analysis shared by every layer (tokens, sentences); depends on nothing in ragloop."""
