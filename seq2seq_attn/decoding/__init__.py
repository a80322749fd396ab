"""The search stage: beam search over a trained model, its lexical shortlist and int8 variants, ensembles,
the teacher-forced pass, and loading trained runs from their folders.
"""
