"""ctx: a knowledge base over files and git repositories."""
