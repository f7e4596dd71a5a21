package finder

// nicknames maps a common English nickname (normalized, as NormalizeName
// writes it) to the formal first names it stands for, most likely first.
// A person asked about as "Bob Smith" usually has a mailbox written with
// "robert": the finder tries the formal names after the name as given
// (weight nicknameWeight, see parseName).
//
// Source: written for bulkd by hand (no list was copied) from the common
// English hypocorisms of the given names most frequent in the US and UK,
// cut to widely used pairs. A nickname that is a formal name in its own
// right ("Will", "Ray") only adds the longer name as a later candidate,
// never replaces the name given.
var nicknames = map[string][]string{
	"abby": {"abigail"}, "al": {"albert", "alan", "alexander"}, "alex": {"alexander", "alexandra"},
	"andy": {"andrew"}, "angie": {"angela"}, "annie": {"anne", "anna"}, "art": {"arthur"},
	"barb": {"barbara"}, "becky": {"rebecca"}, "ben": {"benjamin"}, "bert": {"albert", "robert"},
	"beth": {"elizabeth"}, "betty": {"elizabeth"}, "bill": {"william"}, "billy": {"william"},
	"bob": {"robert"}, "bobby": {"robert"}, "brad": {"bradley"}, "cathy": {"catherine"},
	"charlie": {"charles"}, "chris": {"christopher", "christine"}, "chuck": {"charles"},
	"cindy": {"cynthia"}, "dan": {"daniel"}, "danny": {"daniel"}, "dave": {"david"},
	"deb": {"deborah"}, "debbie": {"deborah"}, "dick": {"richard"}, "don": {"donald"},
	"doug": {"douglas"}, "ed": {"edward"}, "eddie": {"edward"}, "fred": {"frederick"},
	"gabe": {"gabriel"}, "greg": {"gregory"}, "hank": {"henry"}, "harry": {"henry", "harold"},
	"jack": {"john"}, "jake": {"jacob"}, "jeff": {"jeffrey"}, "jen": {"jennifer"},
	"jenny": {"jennifer"}, "jerry": {"gerald", "jerome"}, "jim": {"james"}, "jimmy": {"james"},
	"joe": {"joseph"}, "joey": {"joseph"}, "johnny": {"john"}, "jon": {"jonathan"},
	"josh": {"joshua"}, "kate": {"katherine", "kathryn"}, "kathy": {"katherine", "kathleen"},
	"katie": {"katherine"}, "ken": {"kenneth"}, "kenny": {"kenneth"}, "kim": {"kimberly"},
	"larry": {"lawrence"}, "len": {"leonard"}, "liz": {"elizabeth"}, "lizzie": {"elizabeth"},
	"maggie": {"margaret"}, "matt": {"matthew"}, "meg": {"margaret"}, "mike": {"michael"},
	"mikey": {"michael"}, "mitch": {"mitchell"}, "nate": {"nathan", "nathaniel"},
	"nick": {"nicholas"}, "pam": {"pamela"}, "pat": {"patrick", "patricia"}, "patty": {"patricia"},
	"peggy": {"margaret"}, "pete": {"peter"}, "phil": {"philip", "phillip"}, "ray": {"raymond"},
	"rich": {"richard"}, "rick": {"richard"}, "ricky": {"richard"}, "rob": {"robert"},
	"robbie": {"robert"}, "ron": {"ronald"}, "ronnie": {"ronald"},
	"sam": {"samuel", "samantha"}, "sandy": {"sandra"}, "steve": {"steven", "stephen"},
	"sue": {"susan"}, "susie": {"susan"}, "ted": {"edward", "theodore"}, "terry": {"terrence"},
	"tim": {"timothy"}, "timmy": {"timothy"}, "tom": {"thomas"}, "tommy": {"thomas"},
	"tony": {"anthony"}, "trish": {"patricia"}, "vicky": {"victoria"}, "vince": {"vincent"},
	"walt": {"walter"}, "will": {"william"}, "willy": {"william"}, "zach": {"zachary"},
}

// nicknameWeight is the weight of a formal name's pairs relative to the
// name as given: after the given name under every likely pattern, before
// the rare forms.
const nicknameWeight = 0.3
