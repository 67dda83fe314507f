"""Prompt texts (Markdown files) used by the synthesis pipelines; a package only so that the
files ship with the project. Each file says at its top how the code reads it."""
