"""Job files: reading them safely and validating them into a frozen :class:`JobSpec`.

A job file is a YAML mapping (JSON is YAML too). Everything that can be wrong with one
is reported at once, one line per problem (field, what was expected, what was found),
as a :class:`~spoolrender.errors.JobInvalid`: the runner writes those lines into the
job's failure record, so the author can fix the file without reading any log.

One module per concern: :mod:`.reading` (bytes off the disk), :mod:`.loading` (bytes
to a YAML mapping), :mod:`.naming` (ids and output paths), :mod:`.fields` (the table of
fields and their checks), :mod:`.spec` (the JobSpec and parse_job), :mod:`.limits`
(the spool's caps on what a render may cost), :mod:`.media` (a Remotion job's settings).

May import: :mod:`spoolrender.config` and below.
"""

from spoolrender.jobfile.fields import KNOWN_FIELDS, REMOTION_CODECS, RENDERERS
from spoolrender.jobfile.limits import render_size_problem
from spoolrender.jobfile.loading import load_yaml_mapping
from spoolrender.jobfile.naming import ID_PATTERN, id_from_filename, is_candidate_name, output_path_problem
from spoolrender.jobfile.reading import read_job_bytes
from spoolrender.jobfile.spec import JobSpec, job_fields, parse_job

__all__ = [
    "ID_PATTERN",
    "KNOWN_FIELDS",
    "REMOTION_CODECS",
    "RENDERERS",
    "JobSpec",
    "id_from_filename",
    "is_candidate_name",
    "job_fields",
    "load_yaml_mapping",
    "output_path_problem",
    "parse_job",
    "read_job_bytes",
    "render_size_problem",
]
