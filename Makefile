# Memory-Constrained Trainer: every command a learner, instructor or maintainer needs.
#   make lab           open the course in JupyterLab (creates .venv on first use)
#   make test          run every test of the project (but the mutation score: make test-mutation)
#   make test-mutation the hidden tests' strength: mutation score, wrong answers on eight seeds (CI runs it)
#   make test-browser  every notebook run in JupyterLab in headless Chromium (math, figures); make test
#                      opens the feedback page, the class report and the formgrader in it
#   make build         regenerate every generated file from the masters
#   make progress      your lessons passed, XP out of 200 and the estimated time left
#   make grade         grade your own notebooks with the real hidden tests (PART=02 for one part)
#   make torch         install the optional extra: PyTorch (CPU), for its cross-checks and train-distributed
#   make train-distributed  data parallel, ZeRO and the full loop on real processes (WORKERS=4), beside the simulation;
#                      FROM=notebooks: your own 029, 035 and 040, against the reference
# For instructors (COURSE_DIR=dir for another course directory, JOBS=n, STUDENTS="alice bob", PART=05, SEED=n):
#   make release       nbgrader generate_assignment of every landed part
#   make autograde     grade every submission in parallel; lists what needs manual grading
#   make feedback      HTML feedback per student (no hidden tests, no reference)
#   make review        the notebooks still waiting for a human (COURSE_DIR/needs-manual-grading.csv); empties as you grade
#   make grades        COURSE_DIR/grades.csv: points per lesson, per part, each part's status and lateness, total
#   make report        COURSE_DIR/report/index.html: scores, pass rates, common mistakes, flagged notebooks
#   make formgrader    JupyterLab on the course directory with nbgrader's formgrader (Nbgrader menu)
#   make mutation      how many small bugs in the reference solutions the hidden tests catch
#   make bench-grading a class of N=6 graded the course's way beside plain nbgrader; 200 students projected
#   make bench-class   a class of CLASS=200 graded with feedback at JOBS=2, measured (about 20 minutes)

PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed
VALIDATE_ANYWHERE := $(VENV)/etc/jupyter/nbgrader_config.py
LAB_ARGS ?=
PYTEST_ARGS ?=
# make test runs on this many processes (pytest-xdist), one test file per process at a time
# (--dist loadfile): a notebook's cells run in order in one kernel, and a module's fixture is
# set up once. TEST_JOBS=0 runs everything in one process.
TEST_JOBS ?= 2
# Each test process's NumPy on one core (as the grading kernels and the judge already are): two processes
# that each start a BLAS thread per core only wait on each other (measured: the heavy files 17 % faster).
ONE_BLAS_THREAD = OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# Every recipe sees the venv's tools first (nbgrader runs `alembic` from PATH) and
# the venv's own kernel, whatever the user's home holds.
export PATH := $(BIN):$(PATH)
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
export PYDEVD_DISABLE_FILE_VALIDATION := 1

# nbgrader's instructor panels and its menu, hidden from the learner's JupyterLab.
NBGRADER_PANELS := create-assignment formgrader course-list assignment-list menu

.PHONY: help bubblewrap chromium lab formgrader report test test-mutation test-browser build progress grade venv clean release autograde feedback grades mutation catalogue bench-grading bench-class torch train-distributed review

help:
	@sed -n '2,/^$$/p' Makefile

venv: $(STAMP) $(VALIDATE_ANYWHERE)

$(STAMP): pyproject.toml
	@echo "== first run: setting up .venv (about 3 minutes; later runs start at once) =="
	@echo "== [1/4] creating the virtual environment"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "== [2/4] installing the course's packages (numpy, jupyterlab, nbgrader, ...): pip shows each one"
	$(PY) -m pip install --progress-bar on -e '.[dev]'
	$(PY) -c "import shared, grading, torch_extra, nbgrader, jupyterlab"  # fail here, not later, if the install failed
	# Byte-compiled once here: where PYTHONDONTWRITEBYTECODE is set (CI images set it), every grading process and
	# every kernel's launcher would otherwise compile the course's modules from source again, each time.
	$(PY) -m compileall -q grading shared tools torch_extra >/dev/null
	@echo "== [3/4] the course's Jupyter kernel and JupyterLab settings"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	for panel in $(NBGRADER_PANELS); do \
	  $(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader:$$panel >/dev/null 2>&1 || exit 1; \
	done
	$(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader >/dev/null 2>&1
	$(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.assignment_list >/dev/null 2>&1
	$(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.course_list >/dev/null 2>&1
	# jupytext builds the notebooks; in the learner's JupyterLab it could pair and rewrite them.
	rm -f $(VENV)/etc/jupyter/jupyter_server_config.d/jupytext.json $(VENV)/etc/jupyter/jupyter_notebook_config.d/jupytext.json
	$(BIN)/jupyter server extension disable --sys-prefix jupyterlab_jupytext >/dev/null 2>&1
	$(BIN)/jupyter labextension disable --level=sys_prefix jupyterlab-jupytext >/dev/null 2>&1
	# No "would you like to be notified about Jupyter news?" prompt.
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	@echo "== [4/4] done"
	touch $(STAMP)

# `nbgrader validate` gives the grader's verdicts (grading/validate.py) from any folder: .venv's nbgrader reads
# its own configuration folder wherever it runs (grading/venv_nbgrader_config.py says why).
$(VALIDATE_ANYWHERE): grading/venv_nbgrader_config.py | $(STAMP)
	mkdir -p $(@D)
	cp grading/venv_nbgrader_config.py $@

# The server listens on this machine only (127.0.0.1), with a new random login token each
# time, made by JupyterLab itself: the browser it opens carries the token (and the address it
# prints with --no-browser), so the learner types nothing, and no other user of the machine can
# start a kernel as the learner. LAB_TOKEN=... sets one instead (not printed then). A token
# reaches JupyterLab through its environment (JUPYTER_TOKEN), never its command line: another
# user of the machine can read every process's command line (/proc/*/cmdline), not its environment.
LAB_TOKEN ?=
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# jupytext's server extension stays off whatever a config file elsewhere says.
NO_JUPYTEXT := --ServerApp.jpserver_extensions jupytext=False --ServerApp.jpserver_extensions jupyterlab_jupytext=False
# The Validate button asks the course's grader (grading/validate.py: make grade's verdicts, in a worker thread)
# in place of nbgrader's validate_assignment, which runs only the visible tests and blocks the server meanwhile.
COURSE_VALIDATE := --ServerApp.jpserver_extensions nbgrader.server_extensions.validate_assignment=False \
  --ServerApp.jpserver_extensions grading.validate=True

lab: export JUPYTER_TOKEN = $(LAB_TOKEN)
lab: $(STAMP) $(VALIDATE_ANYWHERE)
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --ServerApp.ip=127.0.0.1 \
	  $(LAB_ROOT_FLAG) $(NO_JUPYTEXT) $(COURSE_VALIDATE) \
	  --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	  notebooks/01_mlp_core.ipynb $(LAB_ARGS)

# Grading kernels run in Debian's bubblewrap; the tests grade real notebooks, so they need it.
bubblewrap:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "== installing bubblewrap (the grading sandbox)"; \
	    apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	  else echo "make test needs bubblewrap (the grading sandbox): sudo apt-get install bubblewrap"; exit 1; fi; }

# Debian's chromium, for the browser checks (without it they are skipped, saying why).
chromium:
	@command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "== installing chromium (the browser tests' browser)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } || \
	      echo "could not install chromium: the browser checks will be skipped"; \
	  else echo "note: no chromium (sudo apt-get install chromium): the browser checks will be skipped"; fi; }

# Every test but the slow strength checks (test-mutation) and the notebooks run in JupyterLab
# (test-browser): tests/ (the class report and the formgrader opened in the browser among them), the
# solved notebooks (nbval), and the feedback page in the browser (pyproject.toml: testpaths).
test: $(STAMP) $(VALIDATE_ANYWHERE) bubblewrap chromium
	$(ONE_BLAS_THREAD) $(PY) -m pytest -n $(TEST_JOBS) --dist loadfile -m "not mutation" $(PYTEST_ARGS)

# The hidden tests' strength: the mutation score, part by part (about 2,000 mutants graded), and every
# catalogued wrong answer graded on eight run seeds (tests/test_seeds.py); kept out of `make test` to
# hold it to ten minutes; CI runs both (.ci/run).
test-mutation: $(STAMP)
	$(ONE_BLAS_THREAD) $(PY) -m pytest -n $(TEST_JOBS) tests/test_mutation.py tests/test_seeds.py -m mutation $(PYTEST_ARGS)

# Every notebook opened and run in JupyterLab in Debian's chromium (/usr/bin/chromium,
# driven by Playwright); without that chromium the test is skipped, saying why.
test-browser: $(STAMP) $(VALIDATE_ANYWHERE) chromium
	$(PY) -m pytest tests_browser --ignore=tests_browser/test_feedback_page.py $(PYTEST_ARGS)

build: $(STAMP)
	$(PY) tools/build.py

progress: $(STAMP)
	@$(BIN)/mct-progress

PART ?=
grade: $(STAMP) $(VALIDATE_ANYWHERE)
	@$(PY) tools/grade.py $(if $(PART),--part $(PART))

# PyTorch is an optional extra (pyproject.toml, [project.optional-dependencies] torch): the
# course never needs it; with it, `make test` also runs the cross-checks against PyTorch
# (tests/test_torch_*.py) and `make train-distributed` runs (torch_extra/, which imports torch only when
# used). Installed again when pyproject.toml changes.
TORCH_STAMP := $(VENV)/.torch-installed
torch: $(STAMP)
	@if $(PY) -c "import torch" 2>/dev/null && [ $(TORCH_STAMP) -nt pyproject.toml ]; then \
	  echo "torch $$($(PY) -c 'import torch; print(torch.__version__)') is installed"; \
	else \
	  echo "== installing the optional extra torch (PyTorch, CPU build, the version pinned in pyproject.toml)"; \
	  $(PY) -m pip install --progress-bar on -e '.[torch]' && \
	  $(PY) -c "import torch.distributed as d; assert d.is_gloo_available(), 'this torch has no gloo backend'" && \
	  touch $(TORCH_STAMP); \
	fi

# Lessons 029, 035 and 040 on WORKERS real processes (torch.distributed, gloo, on this machine),
# computing with the reference solutions, against the simulated run (tools/train_distributed.py, which
# hands the judge's reference lookup to torch_extra/real_training.py);
# TECHNIQUE=data-parallel, zero or full-loop runs one of them only. FROM=notebooks runs your own 029, 035
# and 040 from notebooks/ instead (the rules for graded code checked first), against the reference;
# TIMEOUT=seconds stops a run that takes longer (120 by default).
WORKERS ?= 4
STEPS ?= 20
TECHNIQUE ?= all
FROM ?= references
train-distributed: $(STAMP)
	@$(PY) tools/train_distributed.py --workers $(WORKERS) --steps $(STEPS) --technique $(TECHNIQUE) --from $(FROM) \
	  $(if $(TIMEOUT),--timeout $(TIMEOUT))

# The instructor's workflow (tools/instructor.py): autograde/ is the course directory unless
# COURSE_DIR names another (it is set up there); grading never depends on the current directory.
COURSE_DIR ?= autograde
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
STUDENTS ?=
INSTRUCTOR = $(PY) tools/instructor.py --course-dir '$(abspath $(COURSE_DIR))'

release: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) release

autograde: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) $(if $(PART),--parts $(PART)) autograde --jobs $(JOBS) $(if $(STUDENTS),--students $(STUDENTS)) $(if $(SEED),--seed $(SEED))

feedback: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) $(if $(PART),--parts $(PART)) feedback --jobs $(JOBS) $(if $(STUDENTS),--students $(STUDENTS))

grades: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) grades

review: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) $(if $(PART),--parts $(PART)) review

report: $(STAMP) $(VALIDATE_ANYWHERE)
	$(PY) tools/report.py --course-dir '$(abspath $(COURSE_DIR))' $(if $(PART),--parts $(PART))

# nbgrader's formgrader in the instructor's JupyterLab (the learner's `make lab` has none of nbgrader's
# instructor panels): a new random login token each time, printed with the address, never on a command
# line (LAB_TOKEN=... sets one, as for make lab); FORMGRADER_ARGS="--no-browser --port 8890" for a server.
FORMGRADER_ARGS ?=
formgrader: export JUPYTER_TOKEN = $(LAB_TOKEN)
formgrader: $(STAMP) $(VALIDATE_ANYWHERE)
	$(INSTRUCTOR) formgrader $(FORMGRADER_ARGS)

mutation: $(STAMP)
	$(PY) tools/mutation.py

catalogue: $(STAMP)
	$(PY) tests/catalogue.py

N ?= 6
bench-grading: $(STAMP)
	$(PY) tools/bench_grading.py --students $(N)

CLASS ?= 200
bench-class: $(STAMP)
	$(PY) tools/bench_grading.py --whole-class $(CLASS)

clean:
	rm -rf $(VENV) build .pytest_cache
