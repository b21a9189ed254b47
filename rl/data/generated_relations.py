"""Everyday pairs of statements written here from templates: training data for the relation judge, never
part of an evaluation (each is marked `generated`).

    from memupdate.rl.data.generated_relations import generated_pairs
    pairs = generated_pairs(3000, seed=0)     # updates, duplicates, compatible pairs and repeated events

Each attribute a person has (where they live, their job, their editor, their diet...) is written in
several ways a memory service writes it: as a state ("Sam lives in Paris"), as a change that may or
may not name the old value ("Sam moved to Berlin last month", "Sam left Paris for Berlin"), and as a
paraphrase of the same state (a duplicate). Compatible pairs are two attributes of one person, one
attribute that holds several values at once (two pets, two hobbies), or one attribute of two people;
events are two occurrences of one kind of event (two trips to Rome), which never replace each other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from memupdate.judge.pairs import LabelledPair

SUBJECTS = ["Sam", "Alice", "Priya", "Marcus", "Yuki", "Omar", "Lena", "Diego", "Chen", "Fatima", "Tom",
            "Grace", "Ivan", "Nora", "Raj", "Zoe", "The user", "User", "Ben", "Mia"]


@dataclass(frozen=True)
class Attribute:
    values: tuple[str, ...]
    states: tuple[str, ...]  # "{s}" the subject, "{v}" the value
    changes: tuple[str, ...]  # "{v}" the new value, "{old}" the old one (optional)
    paraphrases: tuple[str, ...] = ()  # other ways to state "{s}" has "{v}" (duplicates of a state)
    several: bool = False  # a person can hold several values at once: two values are compatible
    details: tuple[str, ...] = ()  # another fact about the same value: compatible with the state


ATTRIBUTES = [
    Attribute(("Paris", "Berlin", "Lisbon", "Toronto", "Austin", "Seoul", "Denver", "Melbourne", "Dublin", "Oslo", "Nairobi", "Chicago"),
              ("{s} lives in {v}", "{s} is based in {v}", "{s} currently resides in {v}", "{s}'s home is in {v}"),
              ("{s} moved to {v} last month", "{s} relocated from {old} to {v}", "{s} just moved to {v}",
               "{s} left {old} and now lives in {v}", "{s} now lives in {v}", "{s} accepted a job in {v} and moved there"),
              ("{s} resides in {v}", "{s} calls {v} home", "{s} is living in {v}"),
              details=("{s} loves the coffee shops in {v}", "{s}'s apartment in {v} has a small balcony", "{s} bikes to work across {v}", "{s} finds rent in {v} expensive")),
    Attribute(("Acme Corp", "Globex", "Initech", "a fintech startup", "Stripe", "a hospital", "the city council", "Umbrella Labs", "a law firm"),
              ("{s} works at {v}", "{s} is employed by {v}", "{s} has a job at {v}"),
              ("{s} quit {old} and now works at {v}", "{s} started a new job at {v}", "{s} joined {v} this week",
               "{s} left {old} for {v}", "{s} switched jobs and is now at {v}", "{s} was hired by {v}"),
              ("{s} is employed at {v}", "{s}'s employer is {v}", "{s} works for {v}"),
              details=("{s}'s manager at {v} is supportive", "{s} is on the data team at {v}", "{s} commutes 30 minutes to {v}", "{s} got a bonus at {v} this year")),
    Attribute(("software engineer", "nurse", "teacher", "data scientist", "product manager", "accountant", "designer", "chef", "lawyer"),
              ("{s} is a {v}", "{s} works as a {v}", "{s}'s job title is {v}"),
              ("{s} was promoted to senior {v}", "{s} changed careers and is now a {v}", "{s} became a {v}",
               "{s} is no longer a {old}; now a {v}", "{s} retrained as a {v}"),
              ("{s} has a career as a {v}", "{s} is working as a {v}")),
    Attribute(("VS Code", "Neovim", "Emacs", "PyCharm", "Sublime Text", "IntelliJ"),
              ("{s} uses {v}", "{s} codes in {v}", "{s}'s editor is {v}"),
              ("{s} switched from {old} to {v}", "{s} is switching to {v}", "{s} now uses {v} instead of {old}",
               "{s} dropped {old} in favour of {v}", "{s} moved over to {v}"),
              ("{s} writes code in {v}", "{s} prefers {v} as an editor"),
              details=("{s} customised the keybindings in {v}", "{s} is struggling with plugins in {v}")),
    Attribute(("vegetarian", "vegan", "pescatarian", "on a keto diet", "a meat eater"),
              ("{s} is {v}", "{s} follows a {v} diet", "{s} eats {v}"),
              ("{s} is no longer {old} and is now {v}", "{s} went {v} this year", "{s} stopped being {old}",
               "{s} recently became {v}"),
              ("{s} keeps a {v} diet", "{s} has been {v}")),
    Attribute(("single", "married", "engaged", "divorced", "dating someone"),
              ("{s} is {v}", "{s}'s relationship status is {v}"),
              ("{s} got {v} in June", "{s} is now {v}", "{s} became {v} recently"),
              ("{s} is currently {v}",)),
    Attribute(("Honda Civic", "Tesla Model 3", "Toyota Corolla", "bicycle", "Ford F-150", "Subaru Outback"),
              ("{s} drives a {v}", "{s} owns a {v}", "{s} gets around in a {v}"),
              ("{s} sold the {old} and bought a {v}", "{s} traded in the {old} for a {v}", "{s} now drives a {v}",
               "{s} replaced the {old} with a {v}"),
              ("{s} has a {v}", "{s}'s car is a {v}"),
              details=("{s}'s {v} needs new tyres", "{s} takes the {v} on road trips")),
    Attribute(("Python", "Rust", "Go", "Java", "TypeScript", "Kotlin"),
              ("{s}'s main programming language is {v}", "{s} mostly programs in {v}"),
              ("{s} rewrote everything in {v} and now mainly uses it", "{s} moved the team from {old} to {v}",
               "{s}'s main language is now {v}"),
              ("{s} primarily writes {v}", "{s} does most of their coding in {v}")),
    Attribute(("3", "4", "5", "6", "8", "10", "12"),
              ("{s} leads a team of {v} engineers", "{s} manages {v} people"),
              ("{s}'s team grew to {v} engineers", "{s} now manages {v} people", "{s} leads {v} engineers after the reorg"),
              ("{s} is in charge of {v} engineers", "{s} has {v} direct reports"),
              details=("{s} runs weekly one-on-ones with the team", "{s} is hiring for the team")),
    Attribute(("every week", "every two weeks", "once a month", "twice a week"),
              ("{s} sees a therapist {v}", "{s} has therapy {v}"),
              ("{s} now sees the therapist {v}", "{s} changed therapy sessions to {v}"),
              ("{s} goes to therapy {v}",)),
    Attribute(("Spotify", "Apple Music", "Tidal", "YouTube Music"),
              ("{s} listens to music on {v}", "{s} pays for {v}"),
              ("{s} cancelled {old} and signed up for {v}", "{s} switched to {v}"),
              ("{s} subscribes to {v}",)),
    Attribute(("the University of Michigan", "MIT", "a community college", "Oxford", "an online bootcamp"),
              ("{s} studies at {v}", "{s} is enrolled at {v}"),
              ("{s} transferred to {v}", "{s} graduated and started a master's at {v}"),
              ("{s} attends {v}", "{s} is a student at {v}")),
    Attribute(("iPhone", "Pixel", "Samsung Galaxy", "Nokia flip phone"),
              ("{s} uses an {v}", "{s}'s phone is a {v}"),
              ("{s} upgraded from the {old} to a {v}", "{s} got a new {v} and gave away the {old}"),
              ("{s} has a {v} phone",)),
    Attribute(("Jazz", "hiking", "chess", "pottery", "rock climbing", "painting", "the guitar", "gardening", "running"),
              ("{s} enjoys {v}", "{s} likes {v}", "{s} is into {v}"),
              ("{s} took up {v}", "{s} started {v}"),
              ("{s} is a fan of {v}", "{s} loves {v}"), several=True),
    Attribute(("a dog named Max", "a cat named Luna", "two rabbits", "a parrot", "a golden retriever"),
              ("{s} has {v}", "{s} owns {v}"),
              ("{s} adopted {v}",),
              ("{s} is the owner of {v}",), several=True),
    Attribute(("Spanish", "French", "Japanese", "Mandarin", "German"),
              ("{s} speaks {v}", "{s} is learning {v}"),
              ("{s} began studying {v}",),
              ("{s} can speak {v}",), several=True),
]

EVENTS = [
    ("{s} visited {p} in {y}", ("Rome", "Tokyo", "Lisbon", "New York", "Cape Town", "Kyoto", "Prague"), ("2018", "2019", "2021", "2022", "2023")),
    ("{s} ran a half marathon in {p} in {y}", ("Boston", "Berlin", "Chicago", "Valencia"), ("2019", "2021", "2022", "2024")),
    ("{s} went to a concert in {p} in {y}", ("London", "Austin", "Seoul", "Dublin"), ("March 2022", "May 2023", "October 2023", "June 2024")),
    ("{s} attended a wedding in {p} in {y}", ("Napa", "Goa", "Cancun", "Vienna"), ("spring 2021", "summer 2022", "August 2023", "2024")),
    ("{s} had dinner at {p} on {y}", ("an Italian place", "Nobu", "a taco truck", "the new ramen bar"), ("Friday", "Saturday", "her birthday", "May 3")),
    ("{s} went camping at {p} in {y}", ("Yosemite", "the lake", "Big Sur", "the Rockies"), ("July", "September", "2022", "2023")),
    ("{s} flew to {p} for work in {y}", ("Singapore", "Frankfurt", "Denver", "Toronto"), ("January", "April", "2023", "2024")),
]
# A place and the wider place it lies in: two true statements ("Alex lives in Seattle." / "Alex lives in the USA.").
BROADER = {"Seattle": "the USA", "Lyon": "France", "Osaka": "Japan", "Toronto": "Canada", "Austin": "Texas",
           "Porto": "Portugal", "Munich": "Germany", "Cork": "Ireland", "Brooklyn": "New York", "Kyoto": "Japan",
           "Denver": "Colorado", "Bergen": "Norway", "Pune": "India", "Leeds": "the UK", "Cusco": "Peru"}
BROADER_STATES = ("{s} lives in {v}", "{s} is based in {v}", "{s} grew up in {v}", "{s} works in {v}")
# One frame, values of different kinds ("Sam is a vegetarian." / "Sam is a woman.", "Chen has a library card." /
# "Chen has two sisters."): alike in words, two true facts. Two values of one kind in a frame that holds one
# value at a time are an update ("Sam is single." -> "Sam is married.").
FRAMES = {
    "{s} is {v}": (("vegetarian", "vegan", "a meat eater"), ("single", "married", "divorced"), ("a woman", "a man"),
                   ("left-handed", "right-handed"), ("a nurse", "a teacher", "a lawyer"), ("an only child", "the eldest of three"),
                   ("afraid of heights", "allergic to cats"), ("retired", "a student")),
    "{s} has {v}": (("a library card", "a gym membership"), ("two sisters", "one brother", "three cousins nearby"),
                    ("a garden", "a balcony"), ("a dog named Max", "a cat named Luna"), ("a mortgage", "a student loan"),
                    ("a driving licence", "a passport")),
    "{s} collects {v}": (("old postcards", "vinyl records", "stamps", "comic books"),),
    "{s} likes {v}": (("tacos", "sushi", "spicy food"), ("jazz", "country music", "techno"), ("rainy days", "long walks"),
                      ("board games", "crossword puzzles")),
}
SINGLE_VALUED = {("single", "married", "divorced"), ("left-handed", "right-handed"), ("a nurse", "a teacher", "a lawyer"),
                 ("retired", "a student"), ("vegetarian", "vegan", "a meat eater")}
EVENT_PARAPHRASES = ["{s} made a trip to {p} in {y}", "In {y}, {s} visited {p}", "{s} travelled to {p} in {y}"]
DAYS = ["2024-01-05", "2024-02-11", "2024-03-20", "2024-05-02", "2024-06-18", "2024-08-09", "2024-09-30", "2024-11-14"]


def _terse(text: str, s: str) -> str:
    """The statement as terse memory services write it, without its subject ("Lives in Paris")."""
    if not text.startswith(s + " "):
        return text
    rest = text[len(s) + 1 :]
    return rest[:1].upper() + rest[1:]


def generated_pairs(count: int, *, seed: int = 0) -> list[LabelledPair]:
    """`count` pairs, about 35% updates, 20% duplicates, 30% compatible, 15% events, each stated on two
    days (older first); an update's change is sometimes written without naming the old value."""
    rng = random.Random(seed)
    makers = [(_update, 0.35), (_duplicate, 0.2), (_compatible, 0.3), (_events, 0.15)]
    pairs = []
    for i in range(count):
        maker = rng.choices([m for m, _ in makers], [w for _, w in makers])[0]
        subject = rng.choice(SUBJECTS)
        first, second, label, event = maker(rng, subject)
        if rng.random() < 0.3 and first.startswith(subject + " ") and second.startswith(subject + " "):
            first, second = _terse(first, subject), _terse(second, subject)  # one person's memory: no subject
        days = sorted(rng.sample(DAYS, 2))
        timed = rng.random() < 0.7  # some pairs carry no times: the judge reads the texts alone
        pairs.append(LabelledPair(
            first, second, label, days[0] if timed else None, days[1] if timed else None, event,
            source="generated", group=f"generated-{i % 50}", generated=True,
        ))
    return pairs


def _update(rng: random.Random, s: str) -> tuple[str, str, str, bool]:
    if rng.random() < 0.1:  # one frame, two values of one kind that holds one at a time
        values = rng.choice(sorted(SINGLE_VALUED))
        old, new = rng.sample(values, 2)
        return f"{s} is {old}", rng.choice((f"{s} is {new}", f"{s} is now {new}", f"{s} is no longer {old}")), "update", False
    attribute = rng.choice([a for a in ATTRIBUTES if not a.several])
    old, new = rng.sample(attribute.values, 2)
    first = rng.choice(attribute.states).format(s=s, v=old)
    if rng.random() < 0.35:  # the new value told as a plain state: the update is only in the attribute
        second = rng.choice(attribute.states).format(s=s, v=new)
    else:
        second = rng.choice(attribute.changes).format(s=s, v=new, old=old)
    return first, second, "update", False


def _duplicate(rng: random.Random, s: str) -> tuple[str, str, str, bool]:
    if rng.random() < 0.25:
        template, places, years = rng.choice(EVENTS)
        p, y = rng.choice(places), rng.choice(years)
        return template.format(s=s, p=p, y=y), rng.choice(EVENT_PARAPHRASES).format(s=s, p=p, y=y), "duplicate", True
    attribute = rng.choice(ATTRIBUTES)
    value = rng.choice(attribute.values)
    first = rng.choice(attribute.states).format(s=s, v=value)
    second = rng.choice(attribute.paraphrases + attribute.states).format(s=s, v=value)
    if second == first:
        second = rng.choice(attribute.paraphrases).format(s=s, v=value)
    return first, second, "duplicate", False


def _compatible(rng: random.Random, s: str) -> tuple[str, str, str, bool]:
    kind = rng.random()
    if kind < 0.12:  # one frame, values of two kinds (or two frames), alike in words: both true
        frame = rng.choice(list(FRAMES))
        first_kind, second_kind = rng.sample(FRAMES[frame], 2) if len(FRAMES[frame]) > 1 else (FRAMES[frame][0],) * 2
        other_frame = frame if first_kind is not second_kind else rng.choice([f for f in FRAMES if f != frame])
        second_value = rng.choice(second_kind if other_frame == frame else rng.choice(FRAMES[other_frame]))
        if first_kind is second_kind and other_frame == frame:
            second_value = rng.choice([v for v in second_kind if v != first_kind[0]])
        return frame.format(s=s, v=rng.choice(first_kind)), other_frame.format(s=s, v=second_value), "compatible", False
    if kind < 0.2:  # one place within a broader one, either told first
        city = rng.choice(list(BROADER))
        template = rng.choice(BROADER_STATES)
        pair = [template.format(s=s, v=city), rng.choice((template,) + BROADER_STATES).format(s=s, v=BROADER[city])]
        rng.shuffle(pair)
        return pair[0], pair[1], "compatible", False
    if kind < 0.3:  # a state and another fact about the same value: nothing changed
        attribute = rng.choice([a for a in ATTRIBUTES if a.details])
        value = rng.choice(attribute.values)
        pair = [rng.choice(attribute.states).format(s=s, v=value), rng.choice(attribute.details).format(s=s, v=value)]
        rng.shuffle(pair)
        return pair[0], pair[1], "compatible", False
    if kind < 0.6:  # two attributes of one person, the later told as a change ("... quit X", "... switched to Y")
        first_attribute, second_attribute = rng.sample(ATTRIBUTES, 2)
        old, new = rng.sample(second_attribute.values, 2)
        first = rng.choice(first_attribute.states + (first_attribute.changes if rng.random() < 0.3 else ())).format(
            s=s, v=rng.choice(first_attribute.values), old=rng.choice(first_attribute.values))
        second = rng.choice(second_attribute.changes + second_attribute.states).format(s=s, v=new, old=old)
        return first, second, "compatible", False
    if kind < 0.8:  # one attribute that holds several values
        attribute = rng.choice([a for a in ATTRIBUTES if a.several])
        a, b = rng.sample(attribute.values, 2)
        return rng.choice(attribute.states).format(s=s, v=a), rng.choice(attribute.states + attribute.changes).format(s=s, v=b), "compatible", False
    attribute = rng.choice(ATTRIBUTES)  # two people, one attribute
    other = rng.choice([x for x in SUBJECTS if x != s and not x.lower().startswith(("the user", "user"))])
    a, b = rng.sample(attribute.values, 2)
    return (rng.choice(attribute.states).format(s=s, v=a),
            rng.choice(attribute.states + attribute.changes).format(s=other, v=b, old=a), "compatible", False)


def _events(rng: random.Random, s: str) -> tuple[str, str, str, bool]:
    template, places, years = rng.choice(EVENTS)
    if rng.random() < 0.6:  # one place, two times: two trips
        p = rng.choice(places)
        y1, y2 = rng.sample(years, 2)
        return template.format(s=s, p=p, y=y1), template.format(s=s, p=p, y=y2), "events", True
    p1, p2 = rng.sample(places, 2)
    y = rng.choice(years)
    return template.format(s=s, p=p1, y=y), template.format(s=s, p=p2, y=rng.choice(years)), "events", True
